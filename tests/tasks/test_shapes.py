"""What differs by task shape is asked of the shape (nlp_tutorials.tasks.shapes), never decided
by comparing its name elsewhere; and each shape answers as the tasks of the paper need."""
import ast
import re
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.shapes import CHOICE, SEQUENCE, SHAPES, SPAN, TOKEN, ClassPrediction

PACKAGE = Path(__file__).resolve().parents[2] / "nlp_tutorials"


def names_a_shape(node) -> bool:
    """``x.shape.name``, or a task's ``shape`` (``task.shape``, ``self.shape``,
    ``x.task.shape``; an array's ``.shape`` is another thing)."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
        return isinstance(node, ast.Attribute) and node.attr == "shape"
    if not (isinstance(node, ast.Attribute) and node.attr == "shape"):
        return False
    owner = node.value
    return ((isinstance(owner, ast.Name) and owner.id in ("task", "self"))
            or (isinstance(owner, ast.Attribute) and owner.attr == "task"))


def shape_names_in(node) -> set:
    """The shape names written as string constants in ``node`` (a literal, a tuple, a set)."""
    return {n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and n.value in SHAPES}


def branches_on_a_shape_name(tree) -> list[int]:
    """Lines comparing a shape's name with a literal, or looking a shape up by name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_a_shape(side) for side in sides) or any(map(shape_names_in, sides)):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and names_a_shape(node.slice):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_shapes_branches_on_a_shape_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "tasks" / "shapes.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(PACKAGE)}:{line}" for line in branches_on_a_shape_name(tree)]
    assert not found, "branches on a task shape's name:\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    'if task.shape == "span": pass',
    'if task.shape.name in ("sequence", "choice"): pass',
    'HEADS[task.shape]',
    'if kind != "token": pass',
])
def test_the_check_sees_each_way_of_branching(code):
    assert branches_on_a_shape_name(ast.parse(code)) == [1]


def test_every_task_names_one_of_the_package_shapes():
    for name, task_class in TASKS.items():
        assert task_class.shape in SHAPES.values(), name
    assert [s.name for s in SHAPES.values()] == ["sequence", "token", "span", "choice"]


def test_class_shapes_predict_the_arg_max_of_the_softmax():
    logits = np.array([[0.0, 2.0, -1.0], [3.0, 0.0, 0.0]], np.float32)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    for shape in (SEQUENCE, CHOICE):
        predictions = shape.predictions(None, logits, {}, [None, None])
        assert [p.label for p in predictions] == [1, 0]
        np.testing.assert_allclose([p.probabilities for p in predictions],
                                   exp / exp.sum(axis=1, keepdims=True), rtol=1e-6)
    for shape in (TOKEN, SPAN):  # their tasks decode words and spans themselves
        with pytest.raises(NotImplementedError, match=f"a {shape.name} task defines its own"):
            shape.predictions(None, logits, {}, [None, None])


def test_the_explorer_shows_the_chosen_ending_and_a_windowed_example_s_first_window():
    predictions = [ClassPrediction(2, None), ClassPrediction(0, None)]
    assert CHOICE.shown_rows({"input_ids": np.zeros((2, 3, 4))}, predictions) == [(0, 2),
                                                                                 (1, 0)]
    windows = {"input_ids": np.zeros((5, 4)), "window_example": np.array([0, 0, 1, 2, 2])}
    assert SPAN.shown_rows(windows, None) == [(0, None), (2, None), (3, None)]
    assert SEQUENCE.shown_rows({"input_ids": np.zeros((2, 4))}, None) == [(0, None), (1, None)]


def test_each_shape_has_its_head_serving_module_and_baselines_registered():
    import nlp_tutorials.serving  # noqa: F401 (registers the serving modules)
    from nlp_tutorials.analysis.task_baselines import baselines_for
    from nlp_tutorials.models import task_heads
    from nlp_tutorials.serving.savedmodel import ChoiceModule, SequenceModule
    from nlp_tutorials.serving.spans import SpanModule
    from nlp_tutorials.serving.tagging import TaggingModule

    servers = {SEQUENCE: SequenceModule, CHOICE: ChoiceModule, TOKEN: TaggingModule,
               SPAN: SpanModule}
    heads = {SEQUENCE: task_heads.SequenceClassifier, CHOICE: task_heads.MultipleChoice,
             TOKEN: task_heads.TokenClassifier, SPAN: task_heads.SpanExtractor}
    for shape in SHAPES.values():
        assert shape.served and shape.server is servers[shape], shape
        assert shape.head_class() is heads[shape], shape
    # Each task's baselines, as `python -m nlp_tutorials.baseline` prints them.
    expected = {"mrpc": ["majority", "word overlap", "bag of words"],
                "rte": ["majority", "bag of words"], "stsb": ["train mean", "ridge"],
                "conll2003": ["most frequent tag"], "squad": ["sliding window"],
                "squad2": ["sliding window", "always no answer"],
                "swag": ["majority position", "word overlap"]}
    for name, baselines in expected.items():
        assert [found for found, fit in baselines_for(TASKS[name]())] == baselines, name


def test_a_served_shape_without_a_serving_module_or_baselines_fails_loudly():
    from nlp_tutorials.tasks.shapes import SequenceShape, check_baselines, check_served

    class Unregistered(SequenceShape):
        name = "unregistered"

    with pytest.raises(RuntimeError, match=r"^the unregistered shape is served \(served = "
                                           r"True\) but no serving module registered itself"):
        check_served([SEQUENCE, Unregistered()])
    with pytest.raises(RuntimeError, match="^the unregistered shape has no baseline"):
        check_baselines([Unregistered()])
    Unregistered.served = False
    check_served([Unregistered()])  # not served: export-model refuses it in one line


def test_no_module_names_a_part_by_a_module_attribute_string():
    """Parts are registered or imported, never named as "package.module:attribute"."""
    found = [f"{path.relative_to(PACKAGE)}: {node.value}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"nlp_tutorials(\.\w+)+:\w+", node.value)]
    assert not found, "\n".join(found)
