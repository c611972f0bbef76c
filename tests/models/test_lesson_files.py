"""The lesson files read as the lesson: their examples run, and BERT is GPT with another mask and
another step, HuggingFace's interface and pruning coming from bases kept beside them."""
import doctest
import inspect

import pytest

from nlp_tutorials.models import bert, gpt, transformer
from nlp_tutorials.models.huggingface import HuggingFaceBackbone, PretrainedCheckpoints
from nlp_tutorials.models.pruning import HeadPruning


@pytest.mark.parametrize("module", [transformer, gpt, bert], ids=lambda m: m.__name__)
def test_each_lesson_class_example_runs_as_written(module):
    examples = [test for test in doctest.DocTestFinder().find(module) if test.examples]
    assert examples, f"{module.__name__} has no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in examples:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def own_methods(cls) -> set:
    return {name for name, value in vars(cls).items()
            if callable(value) or isinstance(value, classmethod)} - {"__init__"}


def test_bert_defines_only_its_mask_and_its_step():
    assert own_methods(bert.BERT) == {"mask", "step"}
    assert bert.BERT.__mro__[1:3] == (PretrainedCheckpoints, gpt.GPT)


def test_what_is_not_the_lesson_comes_from_the_bases_beside_it():
    for name, base in (("encode", HuggingFaceBackbone), ("prune_heads", HuggingFaceBackbone),
                       ("with_heads_pruned", HeadPruning)):
        assert getattr(gpt.GPT, name) is getattr(base, name)
        assert name not in own_methods(gpt.GPT)
    assert isinstance(inspect.getattr_static(bert.BERT, "from_pretrained"), classmethod)
    assert not hasattr(gpt.GPT, "from_pretrained")
    for cls in (transformer.Transformer, gpt.GPT, bert.BERT):
        assert not {"attend", "attentions", "attention_vectors"} & set(dir(cls))


def test_the_three_lesson_files_fit_in_400_lines_together():
    lines = {module.__name__: len(inspect.getsource(module).splitlines())
             for module in (transformer, gpt, bert)}
    assert sum(lines.values()) <= 400, lines
