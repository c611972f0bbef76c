"""What each command does, given its settings: one function a command.

Each is called with the settings the command line built (already checked), and returns the
exit status (None: 0). Each that writes names what it writes and reads first
(:func:`~nlp_tutorials.system.outputs.writing`): a path it cannot write, an output over its
own input or a model folder another run holds is refused before any work, and Ctrl-C says
what each output holds. TensorFlow is started here, inside the functions, so that ``--help``,
bad flags and those refusals answer before it loads.
"""
import contextlib
import dataclasses
import sys
from pathlib import Path

from nlp_tutorials.cli.settings import EXPORT_EXAMPLES, PlotSettings, default_pickle
from nlp_tutorials.sources.corpus import corpus_files
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import CHECKPOINT_DIR, MODEL_FILE, WEIGHTS_NAME
from nlp_tutorials.system.outputs import Interrupted, Output, writing
from nlp_tutorials.system.progress import ProgressDisplay
from nlp_tutorials.system.startup import start_tensorflow
from nlp_tutorials.training.config import trained_dir
from nlp_tutorials.training.distribute import is_chief, worker_dir
from nlp_tutorials.training.search import SEARCH_FILE



def run_train(config, options, given) -> None:
    """``train``: pre-train, then (unless --no-plots) export the model's attention and draw it.

    ``given`` names the settings set by flags: ``--resume`` checks the config's against the
    saved run. Ctrl-C saves a checkpoint and ends the run (exit status 130).
    """
    model_dir = Output("--model-dir", worker_dir(config.model_dir, config.strategy),
                       folder=True, lock=True, results=(CHECKPOINT_DIR,))
    reads = {"--data": config.data, "--init-from": config.init_from,
             "--corpus": corpus_files(config.corpus) if config.corpus else []}
    with writing([model_dir], reads):
        start_tensorflow()
        from nlp_tutorials.training.pretraining import pretrain

        run = pretrain(config, given, resume=options.resume)
    # Only the chief of a multi-worker run draws: the others hold copies of its weights.
    if not options.no_plots and is_chief(config.strategy):
        with drawing_after_training(model_dir.path):
            pickle_path = pickle_attention(run.model, run.tokenizer, EXPORT_EXAMPLES,
                                           default_pickle(config.model_type), run.test_pairs)
            draw(PlotSettings(model_type=config.model_type, input=str(pickle_path)))


@contextlib.contextmanager
def drawing_after_training(model_dir):
    """Ctrl-C while the pictures are drawn: the trained model is saved already."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted after training: the model in {model_dir} is saved; "
                          f"the attention pictures are not all drawn (`export` and `plot` "
                          f"draw them)") from None


def run_export(settings) -> None:
    """``bert|gpt export``: the attention of a trained model on MRPC test pairs, pickled."""
    with writing([Output("--output", settings.output)], {"--model-dir": settings.model_dir}):
        start_tensorflow()
        from nlp_tutorials.training.checkpoints import restore_model

        model, tokenizer = restore_model(settings.model_dir, settings.model_type)
        pickle_attention(model, tokenizer, settings.n, settings.output)


def pickle_attention(model, tokenizer, n: int, output, test_pairs=None) -> Path:
    """Pickle the attention of a GPT or BERT on the first ``n`` MRPC test pairs (read unless
    ``test_pairs`` are given)."""
    from nlp_tutorials.analysis.visual import export_attention

    path = export_attention(model, tokenizer, n, output, pairs=test_pairs)
    print(f"attention of {n} test pairs written to {path}")
    return path


def run_plot(settings) -> None:
    """``plot``: heatmaps of every example in a pickle, and one line view."""
    with writing([Output("--output-dir", settings.output_dir, folder=True)],
                 {"--input": settings.input}):
        draw(settings)


def draw(settings) -> None:
    """The pictures ``plot``'s ``settings`` ask for (after training: its defaults)."""
    from nlp_tutorials.analysis.visual import plot_all

    paths = plot_all(settings.input, settings.output_dir, case=settings.case,
                     layer=settings.layer, head=settings.head, model_name=settings.model_type)
    print("pictures written:\n" + "\n".join(f"  {p}" for p in paths))


def run_explore(settings) -> None:
    """``explore``: one HTML page from a pickle (--input) or a model (--model-dir)."""
    from nlp_tutorials.analysis.explorer import explore

    if not settings.input and not settings.model_dir:
        settings = dataclasses.replace(settings, model_dir=trained_dir(settings.model_type))
    # The page's path is checked by the explorer, which words its own refusal.
    page = Output("--output", settings.output, checked=False)
    with writing([page], {"--input": settings.input, "--model-dir": settings.model_dir,
                          "--importance": settings.importance, "--data": settings.data}):
        path = explore(settings)
    print(f"explorer page written to {path}")


def run_prepare(settings) -> None:
    """``prepare``: the tokenizer, then the shards (nlp_tutorials.sources.shards)."""
    from nlp_tutorials.sources.corpus import learn_tokenizer
    from nlp_tutorials.text.tokenization import load_tokenizer

    paths = corpus_files(settings.corpus)
    # The shards are written beside --output and renamed into place whole.
    shards = Output("--output", settings.output, folder=True, replaced=True)
    with writing([shards], {"--corpus": paths, "--tokenizer-from": settings.tokenizer_from}):
        if settings.tokenizer_from:
            tokenizer = load_tokenizer(settings.tokenizer_from)
        else:
            tokenizer = learn_tokenizer(settings.tokenizer, settings.vocab_size, paths,
                                        settings.tokenizer_sample_mb)
        start_tensorflow()
        from nlp_tutorials.sources.shards import prepare_shards

        prepare_shards(settings.corpus, settings.output, settings.shards, tokenizer,
                       settings.max_len, settings.seed)


def run_finetune(config) -> None:
    """``bert finetune``: fine-tune on the task, report dev and test scores, save the model."""
    # A recipe search's search.json is worth keeping alone: the next run goes on from it.
    output_dir = Output("--output-dir", worker_dir(config.output_dir, config.strategy),
                        folder=True, lock=True, results=(MODEL_FILE, SEARCH_FILE))
    # The backbone comes from --init-from, from nowhere (--from-scratch) or from --model-dir.
    backbone = "" if config.init_from or config.from_scratch else config.model_dir
    reads = {"--model-dir": backbone, "--init-from": config.init_from, "--data": config.data,
             "--train": config.train, "--dev": config.dev, "--test": config.test}
    with writing([output_dir], reads):
        task = config.make_task()
        task.read_splits()  # before TensorFlow: a bad file answers in a moment
        start_tensorflow()
        from nlp_tutorials.training.finetuning import finetune

        finetune(config, task=task)


def run_evaluate(settings) -> None:
    """``bert evaluate``: the scores printed, metrics and predictions written beside them."""
    output_dir = settings.output_dir or settings.model_dir
    # Into the model folder by default: the same flag names both, as `heads` writes there.
    flag = "--output-dir" if settings.output_dir else "--model-dir"
    with writing([Output(flag, Path(output_dir), folder=True)],
                 {"--model-dir": settings.model_dir, "--data": settings.data,
                  "--file": settings.file}):
        start_tensorflow()
        from nlp_tutorials.finetuned.evaluation import evaluate_model

        evaluate_model(settings.model_dir, settings.split, output_dir, settings.data or None,
                       settings.file or None)


def run_predict(settings) -> None:
    """``bert predict``: one line per pair; on a malformed line, the pairs before it first."""
    if settings.input != "-" and not Path(settings.input).is_file():
        raise UserError(f"{settings.input}: no such file; expected the model's input, one "
                        f"example a line (MRPC: a TSV of sentence pairs; docs/tasks.md has "
                        f"each task's)")
    start_tensorflow()
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.predicting import predict

    head, tokenizer, task = load_finetuned(settings.model_dir)
    if settings.input == "-":
        predict(head, tokenizer, task, sys.stdin, "<stdin>")
        return
    try:
        with open(settings.input, encoding="utf-8-sig") as lines:
            total_lines = sum(1 for _ in lines)
        with open(settings.input, encoding="utf-8-sig") as lines:
            predict(head, tokenizer, task, lines, settings.input, display=predict_display(
                settings.input), total_lines=total_lines)
    except UnicodeDecodeError as err:
        raise UserError(f"{settings.input}: not UTF-8 text ({err.reason})") from None


def predict_display(path):
    """Where ``predict`` on a file shows its progress: standard error (standard output holds
    the answers), unless the answers go to a terminal, where they show the progress
    themselves."""
    if sys.stdout.isatty():
        return None
    return ProgressDisplay(lambda line: print(line, file=sys.stderr), f"predict {path}",
                           stream=sys.stderr)


def run_heads(settings) -> None:
    """``bert heads``: score, study, prune (nlp_tutorials.analysis.bertology)."""
    start_tensorflow()
    from nlp_tutorials.analysis.bertology import heads_command

    heads_command(settings)


def run_export_model(settings) -> None:
    """``bert export-model``: an existing version folder is refused before TensorFlow loads."""
    from nlp_tutorials.system.files import refuse_existing

    version = Output("--output", Path(settings.output) / str(settings.version), folder=True,
                     lock=True, replaced=True)
    with writing([version], {"--model-dir": settings.model_dir, "--data": settings.data,
                             "--calibration": settings.calibration}):
        refuse_existing(version.path, settings.overwrite, "--output")
        start_tensorflow()
        if settings.format in ("onnx", "tflite"):
            from nlp_tutorials.serving.quantization import Int8Check

            if settings.format == "onnx":
                from nlp_tutorials.serving.onnx_export import export_onnx as export
            else:
                from nlp_tutorials.serving.tflite_export import export_tflite as export
            int8 = (Int8Check(settings.max_drop, settings.data, settings.calibration or None)
                    if settings.quantize == "int8" else None)
            export(settings.model_dir, settings.output, settings.version, settings.overwrite,
                   int8=int8)
            return
        from nlp_tutorials.serving.savedmodel import export_model

        export_model(settings.model_dir, settings.output, settings.version,
                           settings.overwrite, settings.ids_only, xla=settings.xla,
                           precision=settings.precision)


def run_split_squad(settings) -> None:
    """``bert split-squad``: two SQuAD files, train and scored, from one; TensorFlow unneeded."""
    for flag in ("input", "without"):
        path = getattr(settings, flag)
        if path and not Path(path).is_file():
            raise UserError(f"--{flag} {path}: no such file; expected a SQuAD JSON file")
    from nlp_tutorials.tasks.squad_split import split_names, write_split

    outputs = [Output("--output", Path(settings.output) / name)
               for name in split_names(settings.input)]
    with writing(outputs, {"--input": settings.input, "--without": settings.without}):
        write_split(settings.input, settings.train_articles, settings.output,
                    without=settings.without or None)


def run_generate(settings) -> None:
    """``gpt generate``: the prompt continued, greedily or by seeded sampling."""
    start_tensorflow()
    from nlp_tutorials.models.decoding import continue_text, greedy, sampler
    from nlp_tutorials.training.checkpoints import restore_model

    model, tokenizer = restore_model(settings.model_dir, "gpt")
    choose = (sampler(settings.temperature or 1.0, settings.top_k, settings.seed)
              if settings.sample else greedy)
    print(continue_text(model, tokenizer, settings.prompt, settings.max_new_tokens, choose))


def run_train_dates(config, options) -> None:
    """``transformer train``: learn the date task, then (unless --no-plots) draw attention."""
    model_dir = Output("--model-dir", config.model_dir, folder=True, lock=True,
                       results=(WEIGHTS_NAME,))
    with writing([model_dir]):
        start_tensorflow()
        from nlp_tutorials.training.seq2seq import train

        train(config)
    if not options.no_plots:
        with drawing_after_training(config.model_dir):
            pickle_path = pickle_date_attention(config.model_dir, EXPORT_EXAMPLES,
                                                default_pickle("transformer"))
            draw(PlotSettings(model_type="transformer", input=str(pickle_path)))


def run_translate(settings) -> None:
    """``transformer translate``: each date rewritten, one line each."""
    start_tensorflow()
    from nlp_tutorials.training.seq2seq import load, translate

    translations = translate(load(settings.model_dir), settings.dates)
    for text, translation in zip(settings.dates, translations):
        print(f"{text} -> {translation}")


def run_export_dates(settings) -> None:
    """``transformer export``: the attention on held-out dates, pickled."""
    with writing([Output("--output", settings.output)], {"--model-dir": settings.model_dir}):
        pickle_date_attention(settings.model_dir, settings.n, settings.output)


def pickle_date_attention(model_dir, n: int, output) -> Path:
    start_tensorflow()
    from nlp_tutorials.analysis.visual import export_date_attention
    from nlp_tutorials.training.seq2seq import load

    path = export_date_attention(load(model_dir), n, output)
    print(f"attention of {n} held-out dates written to {path}")
    return path


def run_baseline(settings) -> None:
    """``python -m nlp_tutorials.baseline``: a line per baseline and split scored; no
    TensorFlow (fitting imports scikit-learn)."""
    from nlp_tutorials.analysis.task_baselines import report_line, run_baselines
    from nlp_tutorials.tasks import get_task

    task = get_task(settings.task, data_dir=settings.data or None,
                    paths={"train": settings.train, "dev": settings.dev, "test": settings.test})
    for result in run_baselines(task, settings.train_articles):
        print(report_line(task, result))
