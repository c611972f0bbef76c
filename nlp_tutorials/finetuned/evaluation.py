"""What ``evaluate`` does: score a saved model on a split of its task, and write what it found."""
import json
from pathlib import Path

from nlp_tutorials.finetuned.folders import load_finetuned
from nlp_tutorials.finetuned.inference import head_outputs
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.progress import ProgressDisplay


def evaluate_model(model_dir, split: str, output_dir, data_dir=None, path=None,
                   printer=print, dev_size: int | None = None) -> dict:
    """Score the fine-tuned model in ``model_dir`` on ``split`` ("dev" or "test") of its task,
    read from ``data_dir`` (None: the task's default folder, MRPC's shipped copy) or from the
    file ``path``; print the scores and write ``metrics_SPLIT.json`` and the task's
    predictions file (``predictions_SPLIT.tsv``, ``.json`` for SQuAD, ``.txt`` for CoNLL) into
    ``output_dir``, each atomically. Returns the scores. The pass over the examples shows its
    progress (:mod:`~nlp_tutorials.system.progress`) on ``printer``.

    ``dev_size``: for a task without a dev file, the last train examples that are its dev
    split (default: what ``finetune --dev-size`` holds out by default)."""
    options = {"data_dir": data_dir, "dev_size": dev_size, "printer": printer}
    if path:
        options["paths"] = {split: path}
    head, tokenizer, task = load_finetuned(model_dir, **options)
    if task.path(split) is None and not (split == "dev" and task.path("train") is not None):
        raise UserError(f"no {split} file for {task.title}: expected "
                        f"{' or '.join(task.file_names.get(split, ())) or 'its file'} in "
                        f"--data DIR, or --file FILE")
    examples = task.examples(split)
    if not examples:
        raise UserError(f"{task.title} {split}: no examples to score (dev is held out of "
                        f"train only by --dev-size)")
    arrays = task.encode(tokenizer, examples, task.max_len)
    outputs = head_outputs(head, arrays,
                           display=ProgressDisplay(printer, f"{task.title} {split}"))
    predictions = task.predictions(outputs, arrays, examples)
    scores = task.score(examples, predictions)
    printer(f"{task.title} {split}: {task.describe(scores)}")
    suffix, text = task.prediction_file(examples, predictions)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output_dir / f"metrics_{split}.json", json.dumps(
        {"task": task.name, "split": split, "examples": len(examples), "scores": scores},
        indent=2, default=float) + "\n")
    write_text_atomic(output_dir / f"predictions_{split}{suffix}", text)
    printer(f"metrics_{split}.json and predictions_{split}{suffix} written to {output_dir}")
    return scores
