#!/bin/bash
# harness-timeout: 60
# Every C function libibverbs and librdmacm export is written the one way
# (issue 26): the whole body of each `#[no_mangle]` function is one
# `export!(...)` (verbs-rt/src/export.rs), which picks the C convention,
# records the call for the tracer where it is traced, and keeps a panic
# from unwinding into C. Lists each export that is written otherwise.
set -u
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "no $py"; exit 77; }

"$py" - "$repo/libibverbs-rs/src" "$repo/librdmacm-rs/src" <<'PY'
import pathlib, re, sys

fn = re.compile(r'#\[no_mangle\]\s*(?://[^\n]*\s*)*pub (?:unsafe )?extern "C" fn (\$?\w+)\s*\(')
bad, seen = [], 0
for root in sys.argv[1:]:
    for path in sorted(pathlib.Path(root).rglob('*.rs')):
        text = path.read_text()
        for m in fn.finditer(text):
            seen += 1
            # The body: from the first '{' after the parameter list.
            depth, i = 0, m.end() - 1
            while True:
                depth += {'(': 1, ')': -1}.get(text[i], 0)
                if depth == 0:
                    break
                i += 1
            body = text[text.index('{', i) + 1:]
            if not re.match(r'\s*export!\(', body):
                line = text.count('\n', 0, m.start()) + 1
                bad.append(f'{path}:{line}: {m.group(1)}: body is not export!(...)')
print(f'{seen} exported functions')
for b in bad:
    print(b)
sys.exit(1 if bad or seen == 0 else 0)
PY
