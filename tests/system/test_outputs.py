"""What a command writes is checked before it starts: paths under files, folders it may not
write, outputs over its own inputs; and Ctrl-C says what each output holds."""
import os
import subprocess

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.outputs import (
    Interrupted,
    Output,
    check_output,
    refuse_overwritten_inputs,
    writing,
)


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process may not write in: read-only, or (for root, whom modes do not stop)
    immutable. Skips where neither stops a write."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK):
        immutable = subprocess.run(["chattr", "+i", str(folder)],
                                   capture_output=True).returncode == 0
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("no way to make a folder this process cannot write")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_a_path_under_a_regular_file_is_one_line(tmp_path):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file")
    for output in (Output("--model-dir", blocker / "run", folder=True),
                   Output("--output", blocker / "a" / "b.pkl")):
        with pytest.raises(UserError) as refused:
            check_output(output)
        assert str(refused.value) == (f"{output.flag} {output.path}: {blocker} is a file, not a "
                                      f"folder; expected a path whose every parent is a folder")


def test_a_file_where_a_folder_goes_and_back(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"^--model-dir .*/file: is a file; expected a folder$"):
        check_output(Output("--model-dir", tmp_path / "file", folder=True))
    with pytest.raises(UserError, match=r"^--output .*: is a folder; expected a file$"):
        check_output(Output("--output", tmp_path))
    check_output(Output("--output", tmp_path / "file"))  # a file is replaced, not refused
    check_output(Output("--model-dir", tmp_path / "new" / "deeper", folder=True))


def test_a_folder_that_may_not_be_written_is_one_line(unwritable):
    for output in (Output("--output", unwritable / "served" / "1", folder=True),
                   Output("--output-dir", unwritable, folder=True),
                   Output("--output", unwritable / "page.html")):
        with pytest.raises(UserError) as refused:
            check_output(output)
        assert str(refused.value) == (f"{output.flag} {output.path}: cannot write in "
                                      f"{unwritable} (permission denied); expected a folder "
                                      f"you may write in")


def test_an_output_that_is_an_input_is_refused_however_spelt(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "link").symlink_to(model)
    for spelling in (model, tmp_path / "link", tmp_path / "other" / ".." / "model"):
        with pytest.raises(UserError) as refused:
            refuse_overwritten_inputs([Output("--pruned-dir", spelling, folder=True)],
                                      {"--model-dir": str(model)})
        both = "" if spelling == model else f" (both are {model})"
        assert str(refused.value) == (
            f"--pruned-dir {spelling} is the same folder as --model-dir {model}{both}; the "
            f"command would write over what it reads: choose another --pruned-dir")


def test_an_output_inside_an_input_is_refused_unless_a_new_file(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "vocab.txt").write_text("[PAD]\n")
    inputs = {"--model-dir": model}
    for output in (Output("--output-dir", model / "pictures", folder=True),
                   Output("--output", model / "vocab.txt")):
        with pytest.raises(UserError, match=rf"^{output.flag} {output.path} lies inside "
                                            rf"--model-dir {model}; the command would write "
                                            rf"into what it reads: choose a path outside it$"):
            refuse_overwritten_inputs([output], inputs)
    # A new file beside the model's (an attention pickle) replaces nothing of it.
    refuse_overwritten_inputs([Output("--output", model / "attention.pkl")], inputs)
    # Nor does an output beside the input, or the input named by the output's own flag.
    refuse_overwritten_inputs([Output("--pruned-dir", tmp_path / "model_pruned25", folder=True),
                               Output("--model-dir", model, folder=True)], inputs)


def test_a_folder_replaced_whole_may_not_hold_an_input(tmp_path):
    version = tmp_path / "served" / "1"
    output = Output("--output", version, folder=True, replaced=True)
    with pytest.raises(UserError, match=rf"^--model-dir {version / 'mrpc'} lies inside "
                                        rf"{version}, which --output replaces whole"):
        refuse_overwritten_inputs([output], {"--model-dir": version / "mrpc"})
    refuse_overwritten_inputs([output], {"--corpus": [tmp_path / "a.txt"], "--data": ""})


@pytest.mark.parametrize("before, after, expected", [
    (False, False, "{path} was not written"),
    (True, False, "{path} is as it was"),
    (False, True, "{path} holds what was written before it, each file whole"),
    (True, True, "{path} holds what was written before it, each file whole"),
])
def test_ctrl_c_says_what_each_output_holds(tmp_path, before, after, expected):
    path = tmp_path / "results"
    if before:
        path.mkdir()
        (path / "old.png").write_text("old")
    with pytest.raises(Interrupted) as interrupted:
        with writing([Output("--output-dir", path, folder=True)]):
            if after:
                path.mkdir(exist_ok=True)
                (path / "new.png").write_text("new")
            raise KeyboardInterrupt
    assert str(interrupted.value) == "interrupted; " + expected.format(path=path)


def test_ctrl_c_in_a_held_folder_before_any_result_leaves_it_unwritten(tmp_path):
    model, pictures = tmp_path / "model", tmp_path / "pictures"
    outputs = [Output("--model-dir", model, folder=True, lock=True, results=("checkpoints",)),
               Output("--output-dir", pictures, folder=True)]
    with pytest.raises(Interrupted) as interrupted:
        with writing(outputs):
            (model / "config.json").write_text("{}")
            raise KeyboardInterrupt
    assert str(interrupted.value) == (f"interrupted; {model} was not written; {pictures} was "
                                      f"not written")
    assert list(tmp_path.iterdir()) == []


def test_what_the_work_says_on_ctrl_c_passes_unchanged(tmp_path):
    with pytest.raises(Interrupted, match="^interrupted at step 3 of 9: checkpoint saved"):
        with writing([Output("--model-dir", tmp_path / "m", folder=True, lock=True)]):
            raise Interrupted("interrupted at step 3 of 9: checkpoint saved")
    with pytest.raises(Interrupted, match="^interrupted; nothing was written$"):
        with writing([]):
            raise KeyboardInterrupt


def test_nothing_is_made_before_the_checks_pass(tmp_path):
    (tmp_path / "in").mkdir()
    outputs = [Output("--model-dir", tmp_path / "new", folder=True, lock=True),
               Output("--output-dir", tmp_path / "in" / "pictures", folder=True)]
    with pytest.raises(UserError, match="lies inside --input"):
        with writing(outputs, {"--input": tmp_path / "in"}):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
