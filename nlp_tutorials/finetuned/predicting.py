"""What ``predict`` prints: one line per example a user gives, as the examples are read."""
from nlp_tutorials.finetuned.inference import head_outputs
from nlp_tutorials.system.progress import ProgressDisplay
from nlp_tutorials.tasks.base import Task


def predict(head, tokenizer, task: Task, lines, source: str, printer=print,
            chunk: int = 64, display: ProgressDisplay | None = None, total_lines: int = 0) -> int:
    """Print one line per example read from ``lines`` (the task parses them and writes the
    prediction: for MRPC ``label<TAB>P(paraphrase)<TAB>s1<TAB>s2``); returns the examples
    predicted.

    Examples are predicted in chunks as they are read, so an error on a late line comes after
    every earlier example's answer has been printed. Given a ``display`` and the
    ``total_lines`` of a file, the lines read out of all are shown after each chunk.
    """
    pending, done, read = [], 0, 0
    progress = display.start(total_lines, unit="line") if display and total_lines else None

    def counted(lines):
        nonlocal read
        for line in lines:
            read += 1
            yield line

    def flush():
        nonlocal done
        if pending:
            arrays = task.encode(tokenizer, pending, task.max_len)
            predictions = task.predictions(head_outputs(head, arrays), arrays, pending)
            for example, prediction in zip(pending, predictions):
                printer(task.format_prediction(example, prediction))
            done += len(pending)
            pending.clear()
        if progress and done:  # a file without examples says only so
            progress.update(read, examples=done)

    try:
        for example in task.parse_lines(counted(lines), source):
            pending.append(example)
            if len(pending) == chunk:
                flush()
    finally:
        flush()
    return done
