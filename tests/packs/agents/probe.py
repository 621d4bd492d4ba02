"""A probe agent: speaks the stream and answers with what its surroundings look like.

``evalkit run`` spawns it like any agent (objective first, then ``--events fd:N``).
Its answer reports, one ``key=value`` per line: the entries of its working
directory, the subject of the working directory's HEAD commit (if it is a git
repository), ``EVALKIT_ALLOWED_HOSTS``, and the title line of the page at
``EVALKIT_PAGES_URL`` (if set). The tests read them back from the answer record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request


def main() -> int:
    argv = sys.argv[1:]
    spec = argv[argv.index("--events") + 1]
    out = os.fdopen(int(spec.partition(":")[2]), "w", encoding="utf-8")

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    emit({"event": "mission_started", "schema_version": 1, "objective": argv[0],
          "catalogue": ["probe"], "gated": [], "max_steps": 0, "history": 0,
          "run_id": "run_probe-1", "sandbox": "none"})
    emit({"event": "step_started", "index": 0})
    seen = {"entries": ",".join(sorted(os.listdir("."))),
            "allowed": os.environ.get("EVALKIT_ALLOWED_HOSTS", "")}
    head = subprocess.run(["git", "log", "-1", "--format=%s"], capture_output=True, text=True,
                          check=False)
    seen["head"] = head.stdout.strip() if head.returncode == 0 else ""
    url = os.environ.get("EVALKIT_PAGES_URL")
    if url:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url + "index.html", timeout=10) as page:
            body = page.read().decode("utf-8")
        seen["title"] = body.split("<title>", 1)[1].split("</title>", 1)[0]
    text = "\n".join(f"{k}={v}" for k, v in seen.items())
    emit({"event": "answer", "text": text, "outcome": "answered"})
    emit({"event": "mission_finished", "outcome": "answered", "steps": 1, "max_steps": 0,
          "elapsed_s": 0.1})
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
