"""``judge``: a model graded the answer against the mission's rubric — as recorded.

The judgment is asked once by ``evalkit judge`` and kept beside the run
(``evalkit.eval.judging``); this check only reads it back, so a model-graded
verdict is re-derived offline like every other. A judgment that was never
recorded is ``not judged``: a failure of its own (never a pass, counted apart
in the totals), because a verdict nobody graded must not read as one that
passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from evalkit.eval import judging
from evalkit.eval.checks import Check, Field, configured

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary

NAME, NOT_JUDGED = "judge", "not_judged"


def _spec(m: Mission) -> judging.Spec:
    return judging.spec_of(m.judge)


def _judgment(m: Mission, s: RunSummary) -> tuple[judging.Spec, str, str, str | None,
                                                     dict[str, Any] | None]:
    """(spec, prompt version, rubric digest, key or None without an answer, judgment)."""
    spec = _spec(m)
    version = judging.prompt_version(spec.template)
    rubric = judging.digest(judging.rubric_of(spec, m.prompt, m.must, m.must_not))
    if not s.answered or s.answer is None:
        return spec, version, rubric, None, None
    key = judging.key_of(rubric, s.answer, spec.judge_id, version)
    return spec, version, rubric, key, (s.judgments or {}).get(key)


def judge(m: Mission, s: RunSummary) -> Iterator[tuple[str, str]]:
    spec, version, _, key, found = _judgment(m, s)
    if key is None:
        yield NAME, "no answer was recorded; this mission's judge grades the answer"
        return
    if found is None:
        yield NOT_JUDGED, (f"not judged: no judgment of this answer by {spec.judge_id} "
                           f"(prompt {version}) is recorded; run evalkit judge")
        return
    if found.get("grade") not in (judging.PASS, judging.FAIL):
        yield NOT_JUDGED, ("not judged: the recorded reply of the judge could not be read "
                           f"({found.get('problem') or 'no grade'})")
        return
    why = "; ".join(found.get("reasons") or ()) or "it gave no reason"
    if spec.min_score is None:
        if found["grade"] != judging.PASS:
            yield NAME, f"the judge ({spec.judge_id}) failed the answer: {why}"
        return
    score = found.get("score")
    if not isinstance(score, (int, float)):
        yield NAME, (f"the judge ({spec.judge_id}) gave no score; this mission needs "
                     f"{spec.min_score:g}")
    elif score < spec.min_score:
        yield NAME, (f"the judge ({spec.judge_id}) scored the answer {score:g}; this mission "
                     f"needs {spec.min_score:g}: {why}")


def note(m: Mission, s: RunSummary) -> dict[str, Any]:
    """Which judge graded (or should have graded) the answer, its grade, and every other
    judge's grade of the same answer and rubric (for the agreement tables)."""
    spec, version, rubric, key, found = _judgment(m, s)
    others = []
    if key is not None:
        answer = judging.answer_digest(s.answer or "")
        mine = (spec.judge_id, version)
        for j in (s.judgments or {}).values():
            if j.get("rubric") == rubric and j.get("answer") == answer \
                    and (j.get("judge"), j.get("prompt")) != mine \
                    and j.get("grade") in (judging.PASS, judging.FAIL):
                others.append({"model": j.get("judge"), "prompt": j.get("prompt"),
                               "grade": j["grade"]})
    others.sort(key=lambda o: (str(o["model"]), str(o["prompt"])))
    grade = found.get("grade") if found else None
    return {"model": spec.judge_id, "prompt": version, "key": key,
            "grade": grade if grade in (judging.PASS, judging.FAIL) else None,
            "score": found.get("score") if found else None,
            "reasons": list(found.get("reasons") or ()) if found else [],
            "machine": sum(1 for c in configured(m.settings) if c.name != NAME),
            "others": others}


def validate(m: Mission, rules: Rules) -> Iterator[str]:
    # The rubric lines themselves are check's (an empty must or must_not is said there). A
    # scripted judge's file is looked for by `evalkit judge`, which reads it: scoring never
    # does, so a suite copied without it still scores its recorded judgments.
    yield from judging.problems(m.judge)


_MEANING = ("a model grades the answer against the rubric (`must`, `must_not`, `criteria`): "
            "`model` (with `base_url`, `api_key_env`) or `scripted: FILE`, `pass` (`grade` or "
            "a least score), `template`; judged by `evalkit judge`, read back by `score` "
            "([Model-graded rubrics](#model-graded-rubrics)); a suite-level `judge:` gives "
            "defaults")

CHECK = Check(
    name=NAME,
    fields=(Field("judge", "mapping", "mapping", _MEANING, suite_default=True),),
    judge=judge,
    validate=validate,
    reads=("answered", "answer", "judgments"),
    emits=(NOT_JUDGED,),
    reasons=((r"^not judged:", NOT_JUDGED),
             (r"^the judge \(.*\) (?:failed|gave no score|scored)"
              r"|^no answer was recorded; this mission's judge", NAME)),
    note=note,
)
