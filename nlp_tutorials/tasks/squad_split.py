"""A SQuAD file split by article: train on some articles, score the others.

SQuAD's train files are large; where only a dev file is at hand, its articles can stand in for
both. Questions about one article share its paragraphs, so the split is by article, never by
question: the articles sorted by title (Python's string order, equal titles in file order), the
first ``train_articles`` to train, the rest to score. The measurements in docs/results.md train
on the first 38 of v1.1 dev's 48 articles and the first 28 of v2.0 dev's 35.

SQuAD v2.0's dev articles are v1.1 dev articles, and its answerable questions largely v1.1's.
A v1.1 model that v2.0 fine-tuning starts from must not have read the articles v2.0 is scored
on, so ``without`` leaves out, before the split, every article whose title another SQuAD file
holds.

:func:`write_split` writes the two parts as SQuAD files of their own (``train-v1.1.json`` and
``scored-v1.1.json``), for ``bert finetune --train ... --test ...``; the baselines split the
same way in memory (:func:`~nlp_tutorials.analysis.task_baselines.split_by_article`).
"""
import json
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.json_files import json_field, read_json
from nlp_tutorials.tasks.base import counted
from nlp_tutorials.tasks.squad_files import load_squad_json, read_squad_file, squad_version


def split_by_title(path, train_articles: int, without=()) -> tuple[list, list]:
    """(train, scored): the indices of the articles of the SQuAD file ``path``, the first
    ``train_articles`` by title and the others, each in title order; articles whose title is
    in ``without`` are on neither side."""
    return title_order(load_squad_json(path), train_articles, Path(path).name, without)


def article_titles(articles: list, name: str) -> list:
    """Each article's title ("" for an article without one); ``name``, the file's, names it
    in the error for a title that is not text."""
    return [json_field(article, "title", str, f"{name}: data[{a}]", default="")
            if isinstance(article, dict) else "" for a, article in enumerate(articles)]


def title_order(articles: list, train_articles: int, name: str,
                without=()) -> tuple[list, list]:
    """:func:`split_by_title` of a file's ``articles`` already read (``name``: the file's, for
    the error)."""
    titles, without = article_titles(articles, name), set(without)
    kept = [i for i, title in enumerate(titles) if title not in without]
    if without and len(kept) < 2:
        raise UserError(f"--without leaves {counted(len(kept), 'article')} of {name}'s "
                        f"{len(titles)}; expected at least 2 to split")
    if not 0 < train_articles < len(kept):
        left_out = f", {len(kept)} once those in --without are left out" if without else ""
        raise UserError(f"--train-articles {train_articles}: expected 1 to {len(kept) - 1} "
                        f"({name} has {len(titles)} articles{left_out})")
    order = sorted(kept, key=titles.__getitem__)
    return order[:train_articles], order[train_articles:]


def split_names(path) -> tuple[str, str]:
    """The files :func:`write_split` writes for the SQuAD file ``path``: ("train-v1.1.json",
    "scored-v1.1.json"), or v2.0's when any question is unanswerable."""
    return versioned_names(squad_version(path) == "squad2")


def versioned_names(unanswerable: bool) -> tuple[str, str]:
    version = "v2.0" if unanswerable else "v1.1"
    return f"train-{version}.json", f"scored-{version}.json"


def write_split(path, train_articles: int, output_dir, printer=print,
                without=None) -> tuple[Path, Path]:
    """Write the articles of the SQuAD file ``path`` into ``output_dir`` as two SQuAD files,
    :func:`split_names`: the first ``train_articles`` by title, then the others, leaving out
    those whose title is in the SQuAD file ``without`` (None: none). Each keeps the file's
    other top-level fields (its ``version``); each is written whole or not at all. Returns
    their paths."""
    questions = read_squad_file(path)  # checked whole first: a bad question stops it here
    document = read_json(path)
    per_article = [0] * len(document["data"])
    for question in questions:
        per_article[question.article] += 1
    left_out = set(article_titles(load_squad_json(without), without)) if without else set()
    sides = title_order(document["data"], train_articles, Path(path).name, left_out)
    if without:
        gone = len(document["data"]) - sum(map(len, sides))
        printer(f"left out {counted(gone, 'article')} whose title {without} holds")
    names = versioned_names(any(question.is_impossible for question in questions))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, indices in zip(names, sides):
        part = {**document, "data": [document["data"][i] for i in indices]}
        target = output_dir / name
        write_text_atomic(target, json.dumps(part))
        printer(f"{target}: {counted(len(indices), 'article')}, "
                f"{counted(sum(per_article[i] for i in indices), 'question')}")
        written.append(target)
    return tuple(written)
