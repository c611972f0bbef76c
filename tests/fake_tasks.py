"""Small tasks of the sequence and choice shapes, read from tab-separated files the tests write,
for checking that the tools (head study, serving, explorer) work on any task's model, not
MRPC's only. Each is a whole :class:`~nlp_tutorials.tasks.base.Task` on a tiny real BERT
(``tests/fixtures/bert_tiny_hf``: :func:`tiny_task_head`).
"""
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.tasks.shapes import CHOICE, SEQUENCE

TINY_BERT = Path(__file__).resolve().parent / "fixtures" / "bert_tiny_hf"


@dataclass(frozen=True)
class Sentence:
    """One sentence and its answer: a label name, or a score as text."""
    text: str
    answer: str


@dataclass(frozen=True)
class Question:
    """A context, its endings and the index of the right one."""
    context: str
    endings: tuple
    answer: int


class TabTask(Task):
    """A task whose files are ``train.tsv`` and ``dev.tsv`` (and ``test.tsv``), one example a
    line of tab-separated fields."""

    file_names = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}

    def read_file(self, path):
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        return [self.example(line.split("\t"), f"{path}:{number}")
                for number, line in enumerate(lines, start=1) if line.strip()]

    def parse_lines(self, lines, source):
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield self.example(line.rstrip("\n").split("\t") + ["0"], f"{source}:{number}")


class SentenceTask(TabTask):
    """Three string labels for one sentence: ``text<TAB>label`` lines."""

    name = "fake_sentences"
    title = "Fake sentences"
    shape = SEQUENCE
    labels = ("low", "mid", "high")
    metrics = (("accuracy", "accuracy"),)

    def example(self, fields, where):
        if len(fields) < 2:
            raise UserError(f"{where}: expected text<TAB>label")
        label = fields[1] if fields[1] in self.labels else self.labels[0]
        return Sentence(fields[0], label)

    def texts(self, examples):
        return [e.text for e in examples]

    def text_inputs(self):
        return ("sentence",)

    def encode(self, tokenizer, examples, max_len):
        rows = [tokenizer.encode_tokens(tokenizer.tokenize(e.text), max_len=max_len)
                for e in examples]
        return {"input_ids": np.array([ids for ids, _ in rows], np.int32),
                "token_type_ids": np.array([types for _, types in rows], np.int32),
                "labels": self.targets(examples)}

    def targets(self, examples):
        return np.array([self.labels.index(e.answer) for e in examples], np.int32)

    def score(self, examples, predictions):
        right = [self.labels.index(e.answer) == p.label for e, p in zip(examples, predictions)]
        return {"accuracy": float(np.mean(right))}


class ScoreTask(SentenceTask):
    """A regression: ``text<TAB>score`` lines; one output, squared error, scored by the
    negative mean squared error (higher is better)."""

    name = "fake_scores"
    title = "Fake scores"
    labels = ("score",)
    metrics = (("neg_mse", "-MSE"),)

    def example(self, fields, where):
        return Sentence(fields[0], fields[1] if len(fields) > 1 else "0")

    def targets(self, examples):
        return np.array([float(e.answer) for e in examples], np.float32)

    def predictions(self, outputs, encoded, examples):
        return [float(row[0]) for row in outputs]

    def score(self, examples, predictions):
        errors = [(float(e.answer) - p) ** 2 for e, p in zip(examples, predictions)]
        return {"neg_mse": -float(np.mean(errors))}


class ChoiceTask(TabTask):
    """Three endings for a context: ``context<TAB>e1<TAB>e2<TAB>e3<TAB>answer index``."""

    name = "fake_choices"
    title = "Fake choices"
    shape = CHOICE
    labels = ("0", "1", "2")
    metrics = (("accuracy", "accuracy"),)

    def example(self, fields, where):
        if len(fields) < 5:
            raise UserError(f"{where}: expected a context, 3 endings and the answer")
        return Question(fields[0], tuple(fields[1:4]), int(fields[4]))

    def texts(self, examples):
        return [t for e in examples for t in (e.context, *e.endings)]

    def encode(self, tokenizer, examples, max_len):
        rows = [[tokenizer.encode_tokens(tokenizer.tokenize(e.context),
                                         tokenizer.tokenize(ending), max_len=max_len)
                 for ending in e.endings] for e in examples]
        return {"input_ids": np.array([[ids for ids, _ in r] for r in rows], np.int32),
                "token_type_ids": np.array([[types for _, types in r] for r in rows], np.int32),
                "labels": np.array([e.answer for e in examples], np.int32)}

    def score(self, examples, predictions):
        return {"accuracy": float(np.mean([e.answer == p.label
                                           for e, p in zip(examples, predictions)]))}


SENTENCES = ["the film was dull and long", "a fine , warm story", "it was fine",
             "nothing happens at all", "the best film of the year", "an average evening"]
CONTEXTS = [("the man opened the door", ("and walked in", "and the sky sang", "then slept")),
            ("she picked up the phone", ("and called home", "of the river", "quietly fish")),
            ("the dog ran", ("after the ball", "a blue number", "into the park"))]


def write_files(task, folder, splits=("train", "dev")):
    """Write a few examples of ``task`` into ``folder`` as its split files; return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if task.shape.name == "choice":
        lines = [f"{c}\t" + "\t".join(e) + f"\t{i % 3}" for i, (c, e) in enumerate(CONTEXTS)]
    elif task.labels == ("score",):
        lines = [f"{s}\t{i * 0.8:.1f}" for i, s in enumerate(SENTENCES)]
    else:
        lines = [f"{s}\t{task.labels[i % 3]}" for i, s in enumerate(SENTENCES)]
    for split in splits:
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def tiny_task_head(task, seed: int = 0):
    """(head, tokenizer) of ``task`` on the tiny real BERT, dropout off."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.text.tokenization import load_tokenizer

    keras.utils.set_random_seed(seed)
    backbone = BERT.from_pretrained(TINY_BERT, printer=lambda line: None)
    return task.build_head(backbone, dropout=0.0), load_tokenizer(TINY_BERT)


def tiny_wordpiece_head(task, seed: int = 0, max_positions: int = 24, hidden_size: int = 16):
    """(head, tokenizer) of ``task`` on a tiny fresh BERT whose WordPiece vocabulary is learnt
    from the fake tasks' texts (so words are pieces and few are ``[UNK]``), dropout off, the
    output layer drawn wide so that answers differ between inputs; its feed-forward is twice
    ``hidden_size`` wide."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.text.tokenization import WordPieceTokenizer

    texts = SENTENCES + [t for c, endings in CONTEXTS for t in (c, *endings)]
    tokenizer = WordPieceTokenizer.train(texts, vocab_size=60)
    keras.utils.set_random_seed(seed)
    backbone = BERT(ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden_size,
                                num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=2 * hidden_size,
                                max_position_embeddings=max_positions,
                                pad_token_id=tokenizer.pad_id, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0))
    head = task.build_head(backbone, **({} if task.shape.name == "span" else {"dropout": 0.0}))
    if task.shape.name in ("sequence", "choice"):
        widen_output(head, task, tokenizer)
    return head, tokenizer


def widen_output(head, task, tokenizer):
    """Rescale a fresh output layer so its logits on the fake examples have mean 0 and std 2
    per output (a fresh one answers nearly the same everywhere): the answers then spread, so a
    wrong token or layout shows in them."""
    if task.shape.name == "choice":
        examples = [Question(c, e, 0) for c, e in CONTEXTS]
    else:
        answer = "0" if task.labels == ("score",) else task.labels[0]
        examples = [Sentence(text, answer) for text in SENTENCES]
    arrays = task.encode(tokenizer, examples, head.backbone.config.max_position_embeddings)
    logits = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}).numpy()
    logits = logits.reshape(-1, head.weights[-1].shape[0])  # [rows, outputs]
    kernel, bias = head.weights[-2], head.weights[-1]  # the output layer's
    assert kernel.path.endswith("kernel") and bias.path.endswith("bias")
    scale = 2.0 / logits.std(axis=0)  # [outputs]
    kernel.assign(kernel.numpy() * scale)
    bias.assign(-scale * (logits.mean(axis=0) - bias.numpy()))


def save_model(head, tokenizer, task, folder):
    """Write a fine-tuned model folder as ``finetune`` does; return it."""
    from nlp_tutorials.finetuned.folders import save_head, save_task

    save_head(head, folder)
    tokenizer.save(folder)
    save_task(folder, task)
    return Path(folder)
