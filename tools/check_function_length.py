#!/usr/bin/env python3
"""Print every C or CUDA function in src/ and tools/ longer than 80 lines.

A function's length is counted from the line of its opening brace to the line
of its closing brace, both included.  The exit status is 1 when a function
over the limit is not in ALLOWLIST below, 0 otherwise (2 on a usage error).

    tools/check_function_length.py [--max N] [--root DIR] [FILE...]
    tools/check_function_length.py --self-test

The scan is lexical, not a parse: comments, string and character literals and
preprocessor directives are blanked out first (keeping line numbers), and of
each #if/#elif/#else chain only the first branch is kept, so that braces the
branches repeat are counted once.  A brace at file scope (or directly inside
extern "C" { } or a namespace) opens a function body when the text before it
since the previous ';', '{' or '}' ends with a parameter list ')' and has no
'=' outside parentheses: struct, enum and initializer braces are not
functions.  The bodies of C++ structs and classes (CUDA files) are scanned
like file scope, so their member functions are counted too.
"""

import os
import re
import sys

MAX_LINES = 80
EXTENSIONS = ('.c', '.h', '.cu', '.cuh', '.cpp', '.cc')
SCAN_DIRS = ('src', 'tools')

# (path relative to the repository root, function name): functions allowed to
# stay over the limit, each with a comment saying why and who splits it, e.g.
#     ('src/train/trainer.c', 'ferry_trainer_create'),  # being split by its owner
# Empty: every function is within the limit.  An entry whose function is no
# longer over the limit is reported, so that it is removed.
ALLOWLIST = set()

NOT_NAMES = {'if', 'for', 'while', 'switch', 'return', 'sizeof', '__attribute__',
             '__launch_bounds__', '__declspec', 'alignas', '_Alignas', 'decltype'}


def blank(text):
    """Comments, literals and preprocessor lines replaced by spaces; newlines
    are kept so that offsets map to the same lines."""
    out = []
    i, n = 0, len(text)
    at_line_start = True      # only whitespace so far on this line
    cond_stack = []           # per open #if: True while skipping a later branch
    skipping = False

    def keep_newlines(s):
        return ''.join('\n' if c == '\n' else ' ' for c in s)

    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ''
        if c == '/' and nxt == '/':
            j = i
            while j < n and text[j] != '\n':
                j += 2 if text[j] == '\\' and j + 1 < n and text[j + 1] == '\n' else 1
            out.append(keep_newlines(text[i:j]))
            i = j
            continue
        if c == '/' and nxt == '*':
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(keep_newlines(text[i:j]))
            i = j
            continue
        if c == '#' and at_line_start:
            # a directive: up to the end of the line, continuations and
            # comments that run past it included
            j = i
            while j < n and text[j] != '\n':
                if text[j] == '\\' and j + 1 < n and text[j + 1] == '\n':
                    j += 2
                elif text.startswith('/*', j):
                    k = text.find('*/', j + 2)
                    j = n if k < 0 else k + 2
                elif text.startswith('//', j):
                    while j < n and text[j] != '\n':
                        j += 1
                else:
                    j += 1
            word = re.match(r'#\s*(\w*)', text[i:j]).group(1)
            if word in ('if', 'ifdef', 'ifndef'):
                cond_stack.append(False)
            elif word in ('elif', 'else', 'elifdef', 'elifndef') and cond_stack:
                cond_stack[-1] = True
            elif word == 'endif' and cond_stack:
                cond_stack.pop()
            skipping = any(cond_stack)
            out.append(keep_newlines(text[i:j]))
            i = j
            continue
        if skipping:
            out.append('\n' if c == '\n' else ' ')
            at_line_start = c == '\n' or (at_line_start and c in ' \t')
            i += 1
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:i + 24])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            end = text.find(')' + raw.group(1) + '"', i + raw.end())
            j = n if end < 0 else end + len(raw.group(1)) + 2
            out.append('""' + keep_newlines(text[i + 2:j]))
            i = j
            at_line_start = False
            continue
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + keep_newlines(text[i + 1:j - 1]) + c)
            i = j
            at_line_start = False
            continue
        out.append(c)
        if c == '\n':
            at_line_start = True
        elif c not in ' \t\r\f\v':
            at_line_start = False
        i += 1
    return ''.join(out)


def strip_trailing_attributes(header):
    """header without trailing __attribute__((...)) groups and qualifiers."""
    while True:
        h = header.rstrip()
        m = re.search(r'\b(const|noexcept|override|final)$', h)
        if m:
            header = h[:m.start()]
            continue
        if h.endswith(')'):
            start = matching_open(h, len(h) - 1)
            if start is not None:
                before = h[:start].rstrip()
                m = re.search(r'\b(__attribute__|__launch_bounds__|__declspec)$', before)
                if m:
                    header = before[:m.start()]
                    continue
        return h


def matching_open(s, close):
    depth = 0
    for k in range(close, -1, -1):
        if s[k] == ')':
            depth += 1
        elif s[k] == '(':
            depth -= 1
            if depth == 0:
                return k
    return None


def function_name(header):
    """The name a function header defines, or None if the brace after this
    header does not open a function body."""
    h = strip_trailing_attributes(header)
    if not h.endswith(')'):
        return None
    depth = 0
    for ch in h:
        if ch == '(':
            depth += 1
        elif ch == ')':
            depth -= 1
        elif ch == '=' and depth == 0:
            return None
    start = matching_open(h, len(h) - 1)
    if start is None:
        return None
    m = re.search(r'([A-Za-z_]\w*)\s*$', h[:start])
    if not m or m.group(1) in NOT_NAMES:
        return None
    return m.group(1)


def functions(text):
    """(name, line of the name, line of '{', line of '}') for each function."""
    clean = blank(text)
    found = []
    stack = []            # one entry per open brace: 'scope', 'function' or 'other'
    header_start = 0
    current = None        # (name, name_line, open_line) of the open function
    line = 1
    for pos, ch in enumerate(clean):
        if ch == '\n':
            line += 1
        elif ch == '{':
            if all(kind == 'scope' for kind in stack):
                header = clean[header_start:pos]
                name = function_name(header)
                if name is not None:
                    name_at = header_start + header.rfind(name)
                    current = (name, clean.count('\n', 0, name_at) + 1, line)
                    stack.append('function')
                elif re.search(r'\bextern\s*"[^"]*"\s*$', header) or \
                        re.search(r'\bnamespace\b[\w\s:]*$', header) or \
                        re.search(r'\b(struct|class|union)\b[^=(){};]*$', header):
                    stack.append('scope')
                    header_start = pos + 1
                else:
                    stack.append('other')
            else:
                stack.append('other')
        elif ch == '}':
            kind = stack.pop() if stack else 'scope'
            if kind == 'function' and current is not None:
                found.append((current[0], current[1], current[2], line))
                current = None
            if all(k == 'scope' for k in stack):
                header_start = pos + 1
        elif ch == ';' and all(kind == 'scope' for kind in stack):
            header_start = pos + 1
    return found


def source_files(root):
    for top in SCAN_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, f)


def self_test():
    sample = r'''
#include <stdio.h>
#define BRACE_MACRO(x) do { if (x) { return; } } while (0)
static const char *s = "not { a brace";
static const char c = '{';
struct point { int x, y; };
static const struct point pts[] = { {1, 2}, {3, 4} };
enum color { RED, GREEN };
/* a comment with a brace { and a fake f(void) { */
static int small(int a)
{
	// } a closing brace in a comment
	return a + '}';
}
#if defined(WITH_X)
static int twice(void) {
#else
static int twice(void)
{
#endif
	return 2;
}
extern "C" {
__global__ void __launch_bounds__(256) kernel(float *out)
{
	out[0] = 1.0f;
	const char *t = "}}}";
	(void)t;
}
}
template <int V> struct vec {
	static_assert(V > 0, "size");
	static __device__ void load(const float *p) { (void)p; }
	static __device__ void store(float *p)
	{
		p[0] = 0;
	}
};
static const struct point origin = { 0, 0 };
static int __attribute__((unused)) attr(int a) __attribute__((pure));
static int *ret_ptr(int (*cb)(int, int), int n) { return n ? 0 : 0; }
'''
    body = '\n'.join('\tx += %d; /* { */' % k for k in range(85))
    sample += 'static void long_one(void)\n{\n\tint x = 0;\n%s\n\t(void)x;\n}\n' % body
    got = [(name, close - open_ + 1) for name, _, open_, close in functions(sample)]
    want = [('small', 4), ('twice', 7), ('kernel', 5), ('load', 1), ('store', 3), ('ret_ptr', 1), ('long_one', 89)]
    if got != want:
        print('self-test FAILED: got %r, want %r' % (got, want))
        return 1
    print('self-test ok: %d functions found with their lengths' % len(want))
    return 0


def main(argv):
    max_lines = MAX_LINES
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == '--self-test':
            return self_test()
        elif a == '--max' and args:
            max_lines = int(args.pop(0))
        elif a == '--root' and args:
            root = os.path.abspath(args.pop(0))
        elif a in ('-h', '--help'):
            print(__doc__.strip())
            return 0
        elif a.startswith('-'):
            print('usage: check_function_length.py [--max N] [--root DIR] [FILE...] | --self-test',
                  file=sys.stderr)
            return 2
        else:
            files.append(os.path.abspath(a))
    if not files:
        files = list(source_files(root))

    over, allowed, total = [], [], 0
    long_allowed = set()
    for path in files:
        rel = os.path.relpath(path, root)
        with open(path, encoding='utf-8', errors='replace') as f:
            text = f.read()
        for name, name_line, open_line, close_line in functions(text):
            total += 1
            length = close_line - open_line + 1
            if length <= max_lines:
                continue
            entry = '%s:%d: %s is %d lines' % (rel, name_line, name, length)
            if (rel, name) in ALLOWLIST:
                allowed.append(entry)
                long_allowed.add((rel, name))
            else:
                over.append(entry)

    for e in over:
        print('%s (over %d)' % (e, max_lines))
    for e in allowed:
        print('%s (allowlisted)' % e)
    checked = {os.path.relpath(p, root) for p in files}
    for rel, name in sorted(ALLOWLIST - long_allowed):
        if rel in checked:
            print('note: allowlisted %s %s is no longer over %d lines: remove it from the allowlist'
                  % (rel, name, max_lines))
    print('%d functions in %d files: %d over %d lines, %d of them allowlisted'
          % (total, len(files), len(over) + len(allowed), max_lines, len(allowed)))
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
