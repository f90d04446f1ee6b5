"""safe_output.py FILE [--json] -- fails unless FILE (a command's captured output) is safe on a terminal.

No control character but newline (no ESC, BEL, CR, backspace, DEL or C1
control) and valid UTF-8 throughout; with --json each non-empty line is
also a JSON document. Prints what is wrong and exits 1."""
import json
import sys

data = open(sys.argv[1], 'rb').read()
bad = [i for i, b in enumerate(data) if (b < 0x20 and b != 0x0a) or b == 0x7f]
try:
    text = data.decode('utf-8')
except UnicodeDecodeError as e:
    sys.exit('not UTF-8: %s: %r' % (e, data[max(0, e.start - 20):e.end + 20]))
bad += [i for i, c in enumerate(text) if 0x80 <= ord(c) <= 0x9f]
if bad:
    sys.exit('control characters at %s: %r' % (bad[:5], data[max(0, bad[0] - 20):bad[0] + 20]))
if '--json' in sys.argv:
    for line in text.splitlines():
        if line.strip():
            try:
                json.loads(line)
            except ValueError as e:
                sys.exit('not JSON: %s: %r' % (e, line[:200]))
