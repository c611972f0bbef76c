"""What differs by task shape is asked of the shape (nlp_tutorials.tasks.shapes), never decided
by comparing its name elsewhere; and each shape answers as the tasks of the paper need."""
import ast
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


def test_each_shape_names_a_serving_module_and_baselines_that_exist():
    from nlp_tutorials.system.references import load_reference

    for shape in SHAPES.values():
        assert isinstance(load_reference(shape.serving_module), type), shape
        assert all(callable(load_reference(fit)) for _, fit in shape.baselines), shape
        assert shape.head_class().__name__ == shape.head_name
