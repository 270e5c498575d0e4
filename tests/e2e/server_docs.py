"""Runs every `sh` example of docs/API.md against a live server with the demo model.

Each block runs in bash in a fresh directory, with http://127.0.0.1:8080 replaced by the server's URL
and `curl` wrapped so that each request's status is checked: 200, or N after a `# expect: N` line. A
`# server: OPTIONS` line starts the block's server with those options.

Usage: python3 tests/e2e/server_docs.py BUILD_DIR"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from hymt_server import Checks, Server, build_dir  # noqa: E402

BUILD = build_dir()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "API.md")
c = Checks("API.md examples")

PRELUDE = r"""
set -e
expect=200
curl() {
  local out code
  out=$(command curl -sS -w '\n%{http_code}' "$@") || { echo "curl failed: $*" >&2; exit 1; }
  code=${out##*$'\n'}
  printf '%s\n' "${out%$'\n'*}"
  if [[ $code != "$expect" ]]; then echo "expected HTTP $expect, got $code: curl $*" >&2; exit 1; fi
  expect=200
}
"""

text = open(DOC, encoding="utf-8").read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
c.check(len(blocks) >= 12, "docs/API.md has curl examples (%d blocks)" % len(blocks))

by_options = {}
for block in blocks:
    m = re.search(r"^# server: (.*)$", block, re.M)
    by_options.setdefault(m.group(1) if m else "", []).append(block)

requests = 0
for options, group in by_options.items():
    with Server(BUILD, *shlex.split(options)) as s:
        for block in group:
            script = re.sub(r"^# expect: (\d+)$", r"expect=\1", block, flags=re.M)
            script = script.replace("http://127.0.0.1:8080", s.url)
            with tempfile.TemporaryDirectory() as tmp:
                p = subprocess.run(["bash", "-c", PRELUDE + script], cwd=tmp, capture_output=True, text=True,
                                   timeout=120)
            first = block.strip().splitlines()[-1 if block.startswith("#") else 0][:90]
            n = len(re.findall(r"^\s*(?:url=\$\()?curl ", block, re.M))
            requests += n
            c.check(p.returncode == 0, "example (%d requests): %s" % (n, first), p.stderr.strip() or p.stdout[-300:])
c.check(requests >= 20, "%d example requests ran" % requests)
c.finish()
