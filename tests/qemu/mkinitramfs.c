/*
 * Writes an initramfs (a "newc" cpio archive, as the kernel unpacks it)
 * holding /init (the given binary), /dev/console, /sys and /proc, so the
 * NUMA guest test needs no cpio tool.
 *
 *   mkinitramfs INIT_BINARY OUT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned ino = 1;

static void entry(FILE *out, const char *name, unsigned mode, unsigned rmaj, unsigned rmin, const char *data,
		  size_t size)
{
	static const char zeros[4] = { 0 };
	size_t namesize = strlen(name) + 1;

	fprintf(out, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", ino++, mode, 0u, 0u, 1u, 0u,
		size, 0u, 0u, rmaj, rmin, namesize, 0u);
	fwrite(name, 1, namesize, out);
	fwrite(zeros, 1, (4 - (110 + namesize) % 4) % 4, out);
	if (size) {
		fwrite(data, 1, size, out);
		fwrite(zeros, 1, (4 - size % 4) % 4, out);
	}
}

int main(int argc, char **argv)
{
	FILE *in, *out;
	char *data;
	long size;

	if (argc != 3 || !strcmp(argv[1], "--help")) {
		printf("usage: mkinitramfs INIT_BINARY OUT\n");
		return argc == 2 ? 0 : 2;
	}
	in = fopen(argv[1], "rb");
	if (!in || fseek(in, 0, SEEK_END) || (size = ftell(in)) < 0 || fseek(in, 0, SEEK_SET) ||
	    !(data = malloc((size_t)size + 1)) || fread(data, 1, (size_t)size, in) != (size_t)size) {
		fprintf(stderr, "mkinitramfs: cannot read %s\n", argv[1]);
		return 1;
	}
	fclose(in);
	if (!(out = fopen(argv[2], "wb"))) {
		fprintf(stderr, "mkinitramfs: cannot write %s\n", argv[2]);
		return 1;
	}
	entry(out, "dev", 040755, 0, 0, NULL, 0);
	entry(out, "dev/console", 020600, 5, 1, NULL, 0);
	entry(out, "sys", 040755, 0, 0, NULL, 0);
	entry(out, "proc", 040755, 0, 0, NULL, 0);
	entry(out, "init", 0100755, 0, 0, data, (size_t)size);
	entry(out, "TRAILER!!!", 0, 0, 0, NULL, 0);
	free(data);
	return fclose(out) == 0 ? 0 : 1;
}
