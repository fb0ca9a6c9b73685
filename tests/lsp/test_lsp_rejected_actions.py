"""Rejected candidates reach the editor as disabled code actions carrying the verifier's reason."""
from ptxfactory.daemon.lsp.code_actions import rejected_actions
from ptxfactory.protocol import Candidate, CandidateRow, LaunchConfig, Measured, NotRun, Rejected


def _row(i: int, result) -> CandidateRow:
    cand = Candidate(kernel_name="k", source=f"int v{i};", kernel_text="", launch=LaunchConfig(grid=[1], block=[32]),
                     description=f"cand {i}")
    return CandidateRow(candidate=cand, result=result.model_copy(update={"candidate_key": cand.key}))


def test_rejected_rows_become_disabled_actions_with_the_reason():
    rows = [
        _row(0, Measured(candidate_key="", timings=[], speedup=1.0)),
        _row(1, Rejected(candidate_key="", check="correctness", reason="held-out size {'M': 3}: 5 of 9 elements wrong")),
        _row(2, NotRun(candidate_key="", reason="no GPU")),
        _row(3, Rejected(candidate_key="", check="race", reason="second run differs")),
    ]
    number = {r.candidate.key: i for i, r in enumerate(rows)}
    actions = rejected_actions(rows, number)
    assert [a.title for a in actions] == ["Candidate 1 rejected: cand 1", "Candidate 3 rejected: cand 3"]
    assert actions[0].disabled.reason == "correctness: held-out size {'M': 3}: 5 of 9 elements wrong"
    assert actions[1].disabled.reason == "race: second run differs"
    assert all(a.edit is None and not a.is_preferred for a in actions)
