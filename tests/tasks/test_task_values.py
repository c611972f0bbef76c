"""Tasks are values: once built, a task refuses every attribute assignment; what varies per run
goes to its constructor, and ``replace`` builds a changed copy that keeps what was read. What a
task learns from its files (its labels, the dev examples held out by default) it learns
without changing, and a model's task reads its data through ``task_with_data``, a copy."""
import pytest

from nlp_tutorials.finetuned.folders import task_with_data
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.base import Task
from tests.fake_tasks import ChoiceTask, ScoreTask, SentenceTask

# Every task class a command can build, the tests' own tasks of each shape beside them.
TASK_CLASSES = [*TASKS.values(), SentenceTask, ScoreTask, ChoiceTask]


@pytest.mark.parametrize("task_class", TASK_CLASSES, ids=lambda c: c.__name__)
def test_every_task_refuses_an_assignment_once_built(task_class):
    task = task_class(max_len=64)
    for name, value in [("max_len", 32), ("data_dir", "elsewhere"), ("labels", ("a", "b")),
                        ("brand_new", 1)]:
        with pytest.raises(AttributeError, match=rf"^{task_class.__name__}\.{name}: a task "
                                                 rf"never changes once built; build it with"):
            setattr(task, name, value)
    with pytest.raises(AttributeError, match=r"\.max_len: a task never changes"):
        del task.max_len
    assert task.max_len == 64 and task.data_dir is None and not hasattr(task, "brand_new")


@pytest.mark.parametrize("task_class", TASK_CLASSES, ids=lambda c: c.__name__)
def test_replace_builds_a_changed_copy_and_leaves_the_task_as_it_was(task_class):
    task = task_class(max_len=64, stride=32)
    copied = task.replace(max_len=48)
    assert type(copied) is task_class and copied is not task
    assert (copied.max_len, copied.stride, task.max_len) == (48, 32, 64)
    assert copied.settings() == {**task.settings(), "max_len": 48}
    with pytest.raises(AttributeError, match="never changes once built"):
        copied.stride = 16


def write_table(folder, rows: int, label=lambda row: "yes" if row % 3 else "no"):
    folder.mkdir(exist_ok=True)
    lines = ["text,label"] + [f"sentence {row},{label(row)}" for row in range(rows)]
    (folder / "train.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_labels_and_the_default_dev_are_learnt_from_train_without_a_change(tmp_path):
    """A task whose class declares no labels learns them from train (sorted); with no dev
    file and no dev_size, a tenth of train is dev (12 rows: 1), said once."""
    said = []
    task = TASKS["custom"](data_dir=write_table(tmp_path / "data", 12), dev_size=None,
                           printer=said.append)
    assert task.labels == () and task.held_out() == 1
    train, dev = task.examples("train"), task.examples("dev")
    assert (len(train), len(dev), dev[0].text) == (11, 1, "sentence 11")
    assert task.labels == ("no", "yes") and task.num_labels == 2
    assert len(said) == 2 and said[0].startswith("train.csv: 12 ")  # read once, and:
    assert said[1] == ("train.csv: 12 examples, fewer than 4,080; the last 1 (a tenth) held "
                       "out as dev")
    assert task.settings()["labels"] == ["no", "yes"]
    # A copy keeps what was read and learnt: nothing is read or said again.
    longer = task.replace(max_len=32)
    assert longer.labels == ("no", "yes") and longer.examples("dev") == dev
    assert len(said) == 2
    # Labels given (saved with a model) win over learning them.
    assert task.replace(labels=["maybe", "no", "yes"]).labels == ("maybe", "no", "yes")


def test_a_copy_reading_another_folder_reads_and_learns_again(tmp_path):
    said = []
    task = TASKS["custom"](data_dir=write_table(tmp_path / "a", 12), printer=said.append)
    assert task.labels == () and len(task.examples("train")) == 12
    other = task.replace(data_dir=write_table(tmp_path / "b", 4, lambda row: f"c{row % 2}"))
    assert other.labels == () and len(other.examples("train")) == 4
    assert other.labels == ("c0", "c1") and task.labels == ("no", "yes")
    assert said[-1].startswith("train.csv: 4 ") and said[-1].endswith("(c0: 2, c1: 2)")


def test_examples_given_are_what_the_task_reads(tmp_path):
    """A recipe search's trials read a held-out share this way; the labels learnt before stay."""
    task = TASKS["custom"](data_dir=write_table(tmp_path / "data", 12))
    train = task.examples("train")
    trial = task.replace(examples_given={"train": train[:9], "dev": train[9:]})
    assert trial.examples("train") == train[:9] and trial.examples("dev") == train[9:]
    assert trial.examples("test") == [] and trial.labels == ("no", "yes")


def test_a_models_task_reads_its_data_through_a_copy(tmp_path):
    folder = write_table(tmp_path / "data", 12)
    task = TASKS["custom"](labels=["no", "yes"])
    with pytest.raises(UserError, match=r"^model: a own data model, whose data is not saved "
                                        r"with it; expected --data DIR"):
        task_with_data(task, "model", None, 2)
    reading = task_with_data(task, "model", folder, 2)
    assert (reading.data_dir, reading.dev_size, len(reading.examples("dev"))) == (folder, 2, 2)
    assert (task.data_dir, task.dev_size) == (None, 0)  # the model's task as it was
    with pytest.raises(UserError, match=r"^--data .*missing: no such folder; expected the "
                                        r"folder holding the own data files$"):
        task_with_data(task, "model", tmp_path / "missing", 2)


def test_a_new_task_class_is_frozen_too_and_one_declaring_no_labels_learns_them(tmp_path):
    class Lines(Task):
        name, title, labels = "lines", "Lines", ()
        file_names = {"train": ("train.txt",)}

        def read_file(self, path):
            return path.read_text().split()

        def learn_labels(self, train):
            return sorted(set(train))

    (tmp_path / "train.txt").write_text("b a b")
    task = Lines(data_dir=tmp_path)
    assert task.labels == () and task.examples("train") == ["b", "a", "b"]
    assert task.labels == ("a", "b")
    with pytest.raises(AttributeError, match=r"^Lines\.labels: a task never changes"):
        task.labels = ("c",)
