"""Peak memory of ``train --corpus``'s input pipeline on a 10 MB and a 1 GB corpus.

    python benchmarks/corpus_memory.py                      # 10 MB, then 1 GB, 240 s each at most
    python benchmarks/corpus_memory.py --sizes-mb 10 --seconds 60

For each size it writes a synthetic corpus into a temporary folder (random words from a
20,000-word list, 1 to 12 sentences a document, a blank line between documents; deleted at the
end), then, in a fresh child process (no TensorFlow: the streamed pipeline is numpy), learns the
word tokenizer from the first 8 MB as ``train --corpus`` does and runs
:meth:`CorpusData.epoch_batches` (read, tokenize, pair, pack, mask; batch 16, max_len 128)
until the corpus ends or ``--seconds`` pass. It prints the child's resident memory at the
start of the pass, at each quarter of the time box, and its peak (VmHWM of /proc/self/status:
not ``ru_maxrss``, which keeps the pre-``exec`` image of the forking parent, here the corpus
writer), and how many of the corpus' documents the pass reached. The claim to check: the peak
does not grow with the corpus size. With ``--prepare`` it also runs the whole
``bert prepare`` command (TensorFlow included) on each corpus, killed if it outlasts the time box,
and prints its peak RSS (VmHWM polled from /proc twice a second) and how long it took.
"""
import argparse
import json
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from pathlib import Path
from nlp_tutorials.sources import corpus
from nlp_tutorials.sources.corpus import CorpusData, corpus_files, learn_tokenizer

read = corpus.read_documents
documents_read = 0

def counted_documents(paths, counts):  # how far into the corpus the pass got
    global documents_read
    for document in read(paths, counts):
        documents_read += 1
        yield document

corpus.read_documents = counted_documents

def rss_mb():
    # (resident now, the peak so far), MB
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return tuple(int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))

path, seconds = sys.argv[1], float(sys.argv[2])
tokenizer = learn_tokenizer("word", 30000, corpus_files(path), 8)
data = CorpusData(path, tokenizer, max_len=128, seed=1, printer=lambda _: None)
began = time.perf_counter()
samples, batches, reached_end = [("start", rss_mb())], 0, True
next_mark = 1
for batch in data.epoch_batches(0, 16):
    batches += 1
    elapsed = time.perf_counter() - began
    if elapsed >= next_mark * seconds / 4 and next_mark < 4:
        samples.append((f"{next_mark}/4 of the time", rss_mb()))
        next_mark += 1
    if elapsed >= seconds:
        reached_end = False
        break
samples.append(("the end of the pass", rss_mb()))
print(json.dumps({"batches": batches, "seconds": time.perf_counter() - began,
                  "reached_end": reached_end, "samples": samples,
                  "documents_read": documents_read, "peak_rss_mb": rss_mb()[1]}))
"""

WORDS = 20_000


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> int:
    """Write about ``megabytes`` MB of documents; returns the number of documents.

    A 16 MB block of random documents is written again and again (with its own documents each
    time as far as the reader can tell: nothing in the pipeline remembers earlier ones), so a
    1 GB corpus takes seconds to make.
    """
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                          for _ in range(rng.randint(2, 9))) for _ in range(WORDS)]
    lines, size, documents = [], 0, 0
    block_bytes = min(megabytes, 16) * 1_000_000
    while size < block_bytes:
        for _ in range(rng.randint(1, 12)):
            line = " ".join(rng.choices(vocabulary, k=rng.randint(5, 30))) + " .\n"
            lines.append(line)
            size += len(line)
        lines.append("\n")
        size += 1
        documents += 1
    block = "".join(lines).encode("utf-8")
    repeats = max(1, round(megabytes * 1_000_000 / len(block)))
    with open(path, "wb") as handle:
        for _ in range(repeats):
            handle.write(block)
    return documents * repeats


def measure(path: Path, seconds: float) -> dict:
    """Run the pipeline in a child process; its figures and peak RSS (MB)."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(path), str(seconds)],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_prepare(path: Path, output: Path, seconds: float) -> dict:
    """Run ``bert prepare`` (4 shards) on ``path``; its peak RSS (MB, VmHWM polled twice a
    second from /proc), seconds, and whether it finished inside the time box (else killed)."""
    command = [sys.executable, "-m", "nlp_tutorials.bert", "prepare", "--corpus", str(path),
               "--output", str(output), "--shards", "4", "--vocab-size", "30000"]
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while child.poll() is None:
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
            peak = max(peak, int(status.split("VmHWM:")[1].split()[0]) / 1024)
        except (OSError, IndexError):  # the process ended between poll() and the read
            pass
        if time.perf_counter() - began > seconds:
            child.kill()
            break
        time.sleep(0.5)
    out, err = child.communicate()
    finished = child.returncode == 0
    if child.returncode not in (0, -9):
        raise RuntimeError(f"prepare failed: {err[-2000:]}")
    return {"peak_rss_mb": peak, "seconds": time.perf_counter() - began, "finished": finished,
            "output": out.strip()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--seconds", type=float, default=240.0,
                        help="time box of each pass over a corpus (default 240)")
    parser.add_argument("--prepare", action="store_true",
                        help="also run the whole `bert prepare` command on each corpus")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}")
    with tempfile.TemporaryDirectory(prefix="corpus_memory_") as folder:
        for megabytes in sorted(args.sizes_mb):
            path = Path(folder) / f"corpus_{megabytes}mb.txt"
            documents = write_corpus(path, megabytes)
            actual = path.stat().st_size / 1e6
            figures = measure(path, args.seconds)
            pairs = figures["batches"] * 16
            print(f"\n{actual:.0f} MB corpus, {documents} documents: "
                  f"{figures['batches']} batches ({pairs} pairs) in {figures['seconds']:.0f} s"
                  f" ({pairs / figures['seconds']:.0f} pairs/s), "
                  f"{'whole corpus read' if figures['reached_end'] else 'time box reached'}"
                  f" after {figures['documents_read']} documents "
                  f"({100 * figures['documents_read'] / documents:.1f}%)")
            for label, (rss, peak) in figures["samples"]:
                print(f"  at {label}: RSS {rss:.0f} MB, peak so far {peak:.0f} MB")
            print(f"  peak RSS of the child (VmHWM): {figures['peak_rss_mb']:.0f} MB")
            if args.prepare:
                shards = Path(folder) / f"shards_{megabytes}mb"
                run = measure_prepare(path, shards, args.seconds)
                print(f"  `bert prepare --shards 4 --vocab-size 30000`: "
                      f"{'finished' if run['finished'] else 'killed at the time box'} after "
                      f"{run['seconds']:.0f} s, peak RSS {run['peak_rss_mb']:.0f} MB; "
                      f"{run['output']}")
                shutil.rmtree(shards, ignore_errors=True)
            path.unlink()


if __name__ == "__main__":
    main()
