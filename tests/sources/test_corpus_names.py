"""``--corpus NAME``: a name that exists as a file is that file; only otherwise is it a glob."""
import json

import pytest

from nlp_tutorials.cli import build_parser, main, train_defaults
from nlp_tutorials.sources.corpus import corpus_files
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.settings import config_from_args
from nlp_tutorials.training.config import TrainConfig


def write_documents(path, documents: int = 12):
    """``documents`` short documents, a blank line between them."""
    path.write_text("".join(f"document {d} begins here .\nand it goes on a little .\n\n"
                            for d in range(documents)), encoding="utf-8")
    return path


def test_a_file_whose_name_looks_like_a_glob_is_read_as_that_file(tmp_path):
    named = write_documents(tmp_path / "corpus[1].txt")
    write_documents(tmp_path / "corpus1.txt")  # what the name matches as a glob
    assert corpus_files(str(named)) == [named]
    star = write_documents(tmp_path / "*.txt")
    assert corpus_files(str(star)) == [star]


def test_a_name_that_is_no_file_is_still_a_glob(tmp_path):
    one = write_documents(tmp_path / "corpus1.txt")
    assert corpus_files(str(tmp_path / "corpus[1].txt")) == [one]
    assert corpus_files(str(tmp_path / "*.txt")) == [one]


def test_a_folder_is_refused_with_the_glob_to_use(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    write_documents(books / "a.txt")
    with pytest.raises(UserError, match=r"a folder; expected a text file or a glob such as "
                                        r"'.*books/\*\.txt'"):
        corpus_files(str(books))


def test_train_accepts_a_corpus_file_named_like_a_glob(tmp_path):
    named = write_documents(tmp_path / "corpus[1].txt")
    args = build_parser("bert").parse_args(["train", "--corpus", str(named)])
    config, _ = config_from_args(TrainConfig, args, **train_defaults("bert"))
    assert config.corpus == str(named)


def test_prepare_reads_a_corpus_file_named_like_a_glob(tmp_path, capsys):
    named = write_documents(tmp_path / "corpus[1].txt")
    output = tmp_path / "shards"
    assert main("bert", ["prepare", "--corpus", str(named), "--output", str(output),
                         "--max-len", "16"]) == 0, capsys.readouterr().err
    description = json.loads((output / "corpus.json").read_text())
    assert description["source"] == str(named) and description["documents"] == 12


def test_the_flags_help_says_how_a_name_is_read(capsys):
    for command in ("train", "prepare"):
        with pytest.raises(SystemExit):
            build_parser("bert").parse_args([command, "--help"])
        assert "a file of that name is read as it is, else the name is a glob" in " ".join(
            capsys.readouterr().out.split())
