#!/usr/bin/env sh
# Print a Python interpreter that ttnn 0.81.1 has wheels for (3.12 or 3.10), or fail saying what is missing.
for cand in "${PYTHON:-}" python3.12 python3.10; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; assert sys.version_info[:2] in ((3, 12), (3, 10))' >/dev/null 2>&1; then
        command -v "$cand"; exit 0
    fi
done
# pyenv installs that are not on the global PATH
for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12* "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*; do
    for exe in "$dir/bin/python3.12" "$dir/bin/python3.10"; do
        [ -x "$exe" ] && { echo "$exe"; exit 0; }
    done
done
echo "ttdecode needs python3.12 or python3.10 (ttnn==0.81.1 ships wheels for cp310/cp312 only); none found. Set PYTHON=/path/to/python3.12." >&2
exit 1
