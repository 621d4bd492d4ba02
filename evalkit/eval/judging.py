"""Model-graded rubrics, the part a scorer needs: what a judge setting means, the key a
judgment is filed under, the judge's prompt, and the judgments a run folder keeps.

A judgment is asked once (``evalkit judge``, in ``evalkit.judge``) and recorded
beside the run; ``score`` only ever reads it back. So everything that decides
*which* judgment a verdict reads lives here, in one place both sides import: the
key is the digest of (rubric, answer, judge model, judge prompt version), and the
prompt version is the template's name with the digest of its text. A changed
rubric, answer, judge model or template is a different key, whose judgment is
either recorded or "not judged" — never a judgment of something else.

Nothing here calls a model or imports the runtime.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalkit.store import layout
from evalkit.store.signing import canonical

#: The packaged judge prompt templates (``<name>.j2``).
TEMPLATES = Path(__file__).parent / "judge_prompts"
DEFAULT_TEMPLATE = "rubric"
#: The keys a ``judge:`` mapping may hold.
SETTINGS = ("rubric", "criteria", "model", "base_url", "api_key_env", "scripted", "pass",
            "template")
RUBRIC_PARTS = ("must", "must_not")
#: The environment variable the judge's key is read from unless ``api_key_env`` names another.
DEFAULT_KEY_ENV = "EVALKIT_JUDGE_API_KEY"
#: The grades a judge may give.
PASS, FAIL = "pass", "fail"


@dataclass(frozen=True)
class Spec:
    """One mission's judge, as its (suite-merged) ``judge:`` mapping says."""

    parts: tuple[str, ...]
    criteria: str | None
    provider: str  # "openai" or "scripted"
    model: str
    base_url: str | None
    key_env: str
    scripted: str | None
    #: None: the judge's own grade decides; a number: the least score that passes.
    min_score: float | None
    template: str

    @property
    def judge_id(self) -> str:
        """The judge model as a key names it (no URL, no key: the same model is the
        same judge wherever it is served)."""
        return f"{self.provider}/{self.model}"


def problems(settings: Mapping[str, Any], *, suite_dir: Path | None = None) -> Iterator[str]:
    """Why a ``judge:`` mapping cannot be used, one sentence each (empty: it can)."""
    unknown = [k for k in settings if k not in SETTINGS]
    if unknown:
        yield f"has unknown setting {unknown[0]!r}; known: {', '.join(SETTINGS)}"
    for name in ("criteria", "model", "base_url", "api_key_env", "scripted", "template"):
        value = settings.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            yield f"setting {name!r} must be a non-empty string"
    parts = settings.get("rubric")
    if parts is not None and (not isinstance(parts, (list, tuple)) or
                              any(p not in RUBRIC_PARTS for p in parts)):
        yield "setting 'rubric' must be a list naming must and/or must_not"
    has_model, has_script = settings.get("model") is not None, settings.get("scripted") is not None
    if has_model == has_script:
        yield ("names no judge; give a model (model, base_url, api_key_env) or a scripted "
               "judge (scripted: FILE)" if not has_model else
               "names both a model and a scripted judge; give one")
    if has_script and (settings.get("base_url") or settings.get("api_key_env")):
        yield "gives base_url or api_key_env to a scripted judge, which calls no endpoint"
    rule = settings.get("pass")
    if rule is not None and rule != "grade" and not (
            isinstance(rule, (int, float)) and not isinstance(rule, bool) and 0 < rule <= 1):
        yield f"setting 'pass' must be 'grade' or a least score in (0, 1], not {rule!r}"
    template = settings.get("template")
    if isinstance(template, str) and template.strip() and not template_path(template).is_file():
        yield (f"names template {template!r}, which evalkit does not ship "
               f"(it ships {', '.join(shipped_templates())})")
    script = settings.get("scripted")
    if suite_dir is not None and isinstance(script, str) and script.strip() \
            and not (suite_dir / script).is_file():
        yield f"names scripted judge {script!r}, which is not a file beside the suite"


def spec_of(settings: Mapping[str, Any]) -> Spec:
    """The judge a valid ``judge:`` mapping names (``problems`` first: this assumes it is)."""
    try:
        return _spec_of(settings)
    except TypeError:  # a plain dict, from a caller that built the settings itself
        return _spec_of.__wrapped__(settings)


@functools.lru_cache(maxsize=1024)
def _spec_of(settings: Mapping[str, Any]) -> Spec:
    criteria = settings.get("criteria")
    parts = settings.get("rubric")
    if parts is None:
        parts = () if criteria else RUBRIC_PARTS
    rule = settings.get("pass")
    scripted = settings.get("scripted")
    model = settings.get("model") or Path(scripted or "judge").stem
    return Spec(tuple(parts), criteria, "scripted" if scripted else "openai", model,
                settings.get("base_url"), settings.get("api_key_env") or DEFAULT_KEY_ENV,
                scripted, None if rule in (None, "grade") else float(rule),
                settings.get("template") or DEFAULT_TEMPLATE)


def rubric_of(spec: Spec, prompt: str, must: tuple[str, ...], must_not: tuple[str, ...]
              ) -> dict[str, Any]:
    """What the judge grades against: the question, the rubric lines it was given, the
    criteria text."""
    given = {"must": list(must), "must_not": list(must_not)}
    return {"question": prompt, **{p: (given[p] if p in spec.parts else []) for p in RUBRIC_PARTS},
            "criteria": spec.criteria}


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical(value)).hexdigest()


def answer_digest(answer: str) -> str:
    return hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest()


def template_path(name: str) -> Path:
    return TEMPLATES / f"{name}.j2"


def shipped_templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATES.glob("*.j2"))


def template_text(name: str) -> str:
    return _template_text(str(template_path(name)))


@functools.lru_cache(maxsize=16)
def _template_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def prompt_version(name: str) -> str:
    """The template's name and the digest of its text: edit the text and every key moves."""
    return _version(name, str(template_path(name)))


@functools.lru_cache(maxsize=16)
def _version(name: str, path: str) -> str:
    return f"{name}@{hashlib.sha256(_template_text(path).encode()).hexdigest()[:12]}"


def key_of(rubric_digest: str, answer: str, judge_id: str, version: str) -> str:
    """The key one judgment is filed under."""
    return digest([rubric_digest, answer_digest(answer), judge_id, version])[:32]


def messages(spec: Spec, rubric: Mapping[str, Any], answer: str) -> list[dict[str, str]]:
    """The judge's request, rendered from its template (jinja2, imported only to ask)."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    text = env.from_string(template_text(spec.template)).render(
        question=rubric["question"], must=rubric["must"], must_not=rubric["must_not"],
        criteria=rubric["criteria"], answer=answer)
    system, _, user = text.partition("\n===\n")
    return [{"role": "system", "content": system.strip()},
            {"role": "user", "content": user.strip()}]


_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_grade(content: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """(``{"grade", "score", "reasons"}``, None) from a judge's reply, or (None, why not)."""
    if not content:
        return None, "the judge replied with no text"
    found = _OBJECT.search(content)
    if found is None:
        return None, "the judge's reply holds no JSON object"
    try:
        data = orjson.loads(found.group(0))
    except orjson.JSONDecodeError as exc:
        return None, f"the judge's JSON does not parse: {exc}"
    if not isinstance(data, dict):
        return None, "the judge's JSON is not an object"
    grade = data.get("grade")
    if isinstance(data.get("passed"), bool) and grade is None:
        grade = PASS if data["passed"] else FAIL
    if grade not in (PASS, FAIL):
        return None, f"the judge's grade is {grade!r}, not 'pass' or 'fail'"
    score = data.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        return None, f"the judge's score is {score!r}, not a number"
    reasons = data.get("reasons") or []
    if isinstance(reasons, str):
        reasons = [reasons]
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return None, "the judge's reasons are not a list of sentences"
    return {"grade": grade, "score": score, "reasons": reasons}, None


# -- the judgments a run folder keeps ---------------------------------------------------------


def judgments_path(events: Path) -> Path:
    """Where the judgments of the run whose stream is ``events`` are kept."""
    return Path(_beside(os.fspath(events)))


def _beside(events: str) -> str:
    # Asked for every stream scored, most of which have none: string joins, not pathlib.
    return os.path.join(os.path.dirname(events), layout.JUDGE_DIR, layout.JUDGE_FILE)


#: What a scorer keeps of each judgment line.
KEPT = ("judge", "prompt", "rubric", "answer", "grade", "score", "reasons", "problem")


def read_judgments(data: bytes) -> dict[str, dict[str, Any]]:
    """Key -> the judgment first recorded under it (a torn or foreign line is passed over)."""
    found: dict[str, dict[str, Any]] = {}
    for line in data.splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("key"), str):
            found.setdefault(entry["key"], {k: entry.get(k) for k in KEPT})
    return found


def read_beside(events: Path | str) -> tuple[str, bytes | None]:
    """(the judgments file beside a stream, its bytes or None when there is none)."""
    path = _beside(os.fspath(events))
    return path, read_file(path)


def read_file(path: Path | str) -> bytes | None:
    """A judgments file's bytes, or None when there is none (one system call for the miss)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        return handle.read()


# -- agreement, for reports -------------------------------------------------------------------


def label(model: str, prompt: str) -> str:
    return f"{model} ({prompt})"


def agreement(verdicts: list[dict[str, Any]], note: str = "judge") -> dict[str, Any]:
    """Per mission, the judge beside the machine checks (where the mission has both), and
    per pair of judges that graded the same answers, how often they agree and Cohen's kappa.
    """
    from evalkit.eval.stats import cohen_kappa

    machine, pairs = [], {}
    for v in verdicts:
        n = v.get(note)
        if not isinstance(n, dict) or n.get("grade") is None:
            continue
        mine = label(n["model"], n["prompt"])
        if n.get("machine"):
            ok = not any(c not in ("judge", "not_judged") for c in v.get("checks") or ())
            machine.append({"key": v["key"], "split": v["split"], "judge": n["grade"],
                            "machine": PASS if ok else FAIL, "agree": (n["grade"] == PASS) == ok})
        for other in n.get("others") or ():
            theirs = label(other["model"], other["prompt"])
            pairs.setdefault((mine, theirs), []).append((n["grade"], other["grade"]))
    table = []
    for (a, b), graded in sorted(pairs.items()):
        same = sum(1 for x, y in graded if x == y)
        table.append({"a": a, "b": b, "answers": len(graded), "agree": same,
                      "kappa": cohen_kappa(graded)})
    return {"machine": machine, "judges": table}
