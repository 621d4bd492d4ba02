"""The diff as plain text for a terminal or a CI log."""

from __future__ import annotations

from evalkit.eval.diff import FIX, REGRESSION, Diff, Flip


def diff_text(diff: Diff) -> str:
    lines = [f"diff of suite '{diff.suite}'", f"  A: {diff.a}", f"  B: {diff.b}"]
    lines += [f"  note: {note}" for note in diff.mismatch]
    for half, c in diff.counts.items():
        if c["compared"]:
            lines.append(f"{half}: {c['compared']} runs compared, {c[REGRESSION]} pass→fail, "
                         f"{c[FIX]} fail→pass, {c['unchanged']} unchanged, "
                         f"{c['reasons_changed']} still failing for other reasons")
    if not diff.flips:
        lines.append("no verdict flipped")
    for flip in diff.flips:
        lines.extend(_flip(flip))
    return "\n".join(lines) + "\n"


def _flip(f: Flip) -> list[str]:
    where = " ".join(p for p in (f.configuration, f.rep) if p)
    head = f"{f.direction}  {f.split}  {f.key}" + (f"  [{where}]" if where else "")
    lines = [head + f"  checks: {', '.join(f.checks) or '—'}"]
    lines += [f"    - A: {r}" for r in f.removed]
    lines += [f"    + B: {r}" for r in f.added]
    if f.judge and (f.judge["changed"] or "judge" in f.checks or "not_judged" in f.checks):
        lines.append("    " + judge_line(f.judge))
    g = f.grounding
    if g:
        for name, t in g["tokens"].items():
            said = []
            if t["gained"]:
                said.append("now " + ", ".join(t["gained"]))
            if t["lost"]:
                said.append("no longer " + ", ".join(t["lost"]))
            lines.append(f"    grounding {name}: {'; '.join(said)}")
        for c in g["checks"]:
            lines.append(f"    grounding check {c['check']}: {c['a'] or '—'} → {c['b'] or '—'}")
    return lines


def judge_line(change: dict) -> str:
    """Which judge graded each side, and whether the judge itself changed."""
    def side(s: dict | None) -> str:
        if s is None:
            return "no judge"
        return f"{s['model']} ({s['prompt']}) {s['grade'] or 'not judged'}"

    said = f"judge: {side(change['a'])} → {side(change['b'])}"
    if change["changed"]:
        said += f"; the judge changed ({', '.join(change['changed'])})"
    return said
