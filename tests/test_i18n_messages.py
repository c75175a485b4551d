"""The simulator's sentences (`simlab.sim.message.Message`) stay English where a string is expected and are said in
Chinese where they are printed: the validator's problems, the walkthrough's steps and holdings, the advisor's
verdict, the rank grid, the split plan, a transfer. sim/ itself never imports simlab.i18n (tests/test_layers.py
holds the layers; here, the words)."""
import ast
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from test_i18n_english import english_words

from simlab.i18n import _, set_language
from simlab.plan import Transfer
from simlab.sim.message import Message

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def test_a_message_is_its_english_and_keeps_its_template():
    m = Message("rank {r}, step {i}: {a}", r=1, i=0, a="1B0")
    assert m == "rank 1, step 0: 1B0" and isinstance(m, str) and hash(m) == hash("rank 1, step 0: 1B0")
    assert (m.template, m.fields) == ("rank {r}, step {i}: {a}", {"r": 1, "i": 0, "a": "1B0"})
    assert json.loads(json.dumps({m: [m]})) == {"rank 1, step 0: 1B0": ["rank 1, step 0: 1B0"]}
    back = pickle.loads(pickle.dumps(Message("{x} and {y}", x=Message("a"), y=2)))
    assert back == "a and 2" and back.template == "{x} and {y}" and back.fields["x"].template == "a"


def test_lists_lines_and_joins_say_their_separators():
    assert [Message.series(x) for x in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a and b", "a, b and c"]
    assert Message.listing("abcd") == "a, b, c, d"
    assert Message.joined(["x{", Message("y")], " {} ") == "x{ {} y"  # braces in a part or separator stay
    set_language("zh")
    assert _(Message.series(["a0", "b0", "c0"])) == "a0、b0 和 c0"
    assert _(Message.lines([Message("rank {r} step {i}", r=1, i=2), "  [0 1]"])) == "rank 1 第 2 步\n  [0 1]"
    assert _(Message.lines([])) == ""  # not the catalog's header, which gettext gives for ""


def test_english_says_a_message_as_it_is_and_a_plain_string_is_looked_up_as_before():
    m = Message("{family}: {ratio:.2f}× slower, mostly {part}", family="TP", ratio=1.3749, part="tp_comm")
    assert _(m) == m == "TP: 1.37× slower, mostly tp_comm"
    set_language("zh")
    assert _(m) == "TP：慢 1.37×，主要多在 tp_comm" and _("why:") == "原因："


def test_a_transfer_is_said_as_a_message():
    t = Transfer(0, 0, 1, 3, 8, "reduce")
    assert str(t) == _(t) == "r0 → r1 (+=) chunk 3 (8 B)"
    set_language("zh")
    assert _(t) == "r0 → r1 (+=) 块 3 (8 B)"
    import test_i18n
    assert Transfer.template in test_i18n.marked_messages()  # its catalog entry is marked where it is printed


def _said_in_chinese(texts) -> list[str]:
    """The texts whose Chinese still holds English words (the allow-list of tests/test_i18n_english.py)."""
    set_language("zh")
    return [f"{t!r} → {_(t)!r}: {sorted(english_words(_(t)))}" for t in texts
            if len(english_words(_(t))) >= 1 and isinstance(t, Message)]


def _validator_problems():
    from simlab.grading.pipeline import BROKEN_ONE_F_ONE_B
    from simlab.sim.pipeline_check import validate
    schedules = [[["0F0", "0F1", "0B0"], ["1B0", "1F0", "1F1", "1B1"]], BROKEN_ONE_F_ONE_B,
                 [["0F0", "0F0"], ["1F0", "1B0", "3F0"]], [["0F0", "2F0", "0B0"]], [["0F0", "0I0", "0B0", "0W0"]],
                 [["0F0", "0W0", "0I0"]], [["0F0", "0B0"], ["1F0", "1B0"]], [["0F9"]], [["0F0"] * 12]]
    return ([p for s in schedules for p in validate(s)] + validate([["0F0", "1F0"], ["1B0"]], stages=2)
            + validate([["0F0"]], stages=4, microbatches=8))  # more missing than are listed


def test_every_validator_problem_is_said_in_chinese():
    problems = _validator_problems()
    templates = {p.template for p in problems}
    for start in ("deadlock:", "missing:", "duplicate:", "duplicate backward:", "{at}", "… and {n} more missing"):
        assert any(t.startswith(start) for t in templates), start  # every kind of problem is among them
    assert _said_in_chinese(problems) == []


def test_every_walkthrough_step_and_holdings_table_is_said_in_chinese():
    from simlab.sim.zero import holdings_text, walkthrough
    steps = [s for stage in range(4) for offload in (False, True) if not (offload and stage < 2)
             for n in (1, 2, 3) for s in walkthrough(stage, layers=3, world_size=n, offload=offload)]
    assert _said_in_chinese([s.description for s in steps]) == []
    said = _(holdings_text(steps[1]))
    assert said.splitlines()[0].startswith("第 1 步：") and said.splitlines()[2].split() == [
        "params", "grads", "optim", "bytes"]  # the table's keys stay: the data's own names


def test_the_advisors_verdicts_rejections_and_notes_are_said_in_chinese():
    from simlab.sim.advisor import search
    from simlab.sim.advisor_explain import tie_line
    from simlab.sim.hybrid_scenarios import SCENARIOS
    texts = []
    for scenario in SCENARIOS:
        result = search(scenario.model, scenario.cluster(), scenario.global_batch, top=1)
        texts += result["explanation"] + result["notes"] + list(result["rejected"]) + [scenario.title()]
        texts += [tie_line(result["ties"])] if result["ties"] else []
    assert len(texts) > 60 and _said_in_chinese(texts) == []


def test_the_rank_grid_and_the_split_plan_are_said_in_chinese():
    from simlab.sim.mesh import Mesh
    from simlab.sim.tensor_parallel import split_linear
    texts = [Mesh(pp=2, dp=2, tp=2).to_text(), Mesh(pp=2, dp=2, ep=2, cp=2, tp=2).to_text()]
    x, w = np.arange(16).reshape(2, 8), np.arange(96).reshape(8, 12)
    texts += [split_linear(kind, 4, x, w).plan.to_text() for kind in ("column", "row")]
    set_language("zh")
    for text in texts:
        said = _(text)
        assert said.count("\n") == text.count("\n")  # the same lines, the table's rows as they were
        assert [line for line in said.splitlines() if len(english_words(line)) >= 2] == []


def test_sim_never_imports_i18n():
    for path in sorted((ROOT / "simlab" / "sim").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert "i18n" not in (node.module or ""), path.name
            elif isinstance(node, ast.Import):
                assert all("i18n" not in a.name for a in node.names), path.name
