"""What ``predict`` prints: one line per example a user gives, as the examples are read."""
from nlp_tutorials.finetuned.inference import head_outputs
from nlp_tutorials.tasks.base import Task


def predict(head, tokenizer, task: Task, lines, source: str, printer=print,
            chunk: int = 64) -> int:
    """Print one line per example read from ``lines`` (the task parses them and writes the
    prediction: for MRPC ``label<TAB>P(paraphrase)<TAB>s1<TAB>s2``); returns the examples
    predicted.

    Examples are predicted in chunks as they are read, so an error on a late line comes after
    every earlier example's answer has been printed.
    """
    pending, done = [], 0

    def flush():
        nonlocal done
        if pending:
            arrays = task.encode(tokenizer, pending, task.max_len)
            predictions = task.predictions(head_outputs(head, arrays), arrays, pending)
            for example, prediction in zip(pending, predictions):
                printer(task.format_prediction(example, prediction))
            done += len(pending)
            pending.clear()

    try:
        for example in task.parse_lines(lines, source):
            pending.append(example)
            if len(pending) == chunk:
                flush()
    finally:
        flush()
    return done
