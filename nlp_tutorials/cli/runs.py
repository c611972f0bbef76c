"""What each command does, given its settings: one function a command.

Each is called with the settings the command line built (already checked), and returns the
exit status (None: 0). TensorFlow is started here, inside the functions, so that ``--help``
and bad flags answer before it loads.
"""
import signal
import sys
from pathlib import Path

from nlp_tutorials.cli.settings import EXPORT_EXAMPLES, default_pickle, trained_dir
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.startup import start_tensorflow
from nlp_tutorials.training.distribute import is_chief

RESULTS = "visual/results"  # where pictures drawn after training go


def train(config, options, given) -> int:
    """``train``: pre-train, then (unless --no-plots) export the model's attention and draw it.

    ``given`` names the settings set by flags: ``--resume`` checks the config's against the
    saved run. Ctrl-C saves a checkpoint and exits with status 130.
    """
    start_tensorflow()
    from nlp_tutorials.training.pretraining import pretrain

    # A shell starts background jobs with SIGINT ignored, and Python keeps that; restore
    # Ctrl-C (KeyboardInterrupt) so an interrupt always saves a checkpoint first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run = pretrain(config, given, resume=options.resume)
    except KeyboardInterrupt:
        print("interrupted: checkpoint saved; continue with --resume", file=sys.stderr)
        return 130
    # Only the chief of a multi-worker run draws: the others hold copies of its weights.
    if not options.no_plots and is_chief(config.strategy):
        pickle_path = export_attention(run.model, run.tokenizer, EXPORT_EXAMPLES,
                                       default_pickle(config.model_type), run.test_pairs)
        draw(pickle_path, RESULTS, 0, None, None, config.model_type)
    return 0


def export(settings) -> None:
    """``bert|gpt export``: the attention of a trained model on MRPC test pairs, pickled."""
    start_tensorflow()
    from nlp_tutorials.training.checkpoints import restore_model

    model, tokenizer = restore_model(settings.model_dir, settings.model_type)
    export_attention(model, tokenizer, settings.n, settings.output)


def export_attention(model, tokenizer, n: int, output, test_pairs=None) -> Path:
    """Pickle the attention of a GPT or BERT on the first ``n`` MRPC test pairs (read unless
    ``test_pairs`` are given)."""
    from nlp_tutorials.analysis.visual import export_attention as export_pairs

    path = export_pairs(model, tokenizer, n, output, pairs=test_pairs)
    print(f"attention of {n} test pairs written to {path}")
    return path


def plot(settings) -> None:
    """``plot``: heatmaps of every example in a pickle, and one line view."""
    draw(settings.input, settings.output_dir, settings.case, settings.layer, settings.head,
         settings.model_type)


def draw(pickle_path, output_dir, case, layer, head, model_name) -> None:
    from nlp_tutorials.analysis.visual import plot_all

    paths = plot_all(pickle_path, output_dir, case=case, layer=layer, head=head,
                     model_name=model_name)
    print("pictures written:\n" + "\n".join(f"  {p}" for p in paths))


def explore(settings) -> None:
    """``explore``: one HTML page from a pickle (--input) or a model (--model-dir)."""
    from nlp_tutorials.analysis.explorer import explore as write_page

    model_dir = None if settings.input else (settings.model_dir
                                             or trained_dir(settings.model_type))
    path = write_page(settings.model_type, settings.output, model_dir, settings.input or None,
                      settings.n, settings.example, settings.layer, settings.head,
                      settings.view, settings.importance)
    print(f"explorer page written to {path}")


def prepare(settings) -> None:
    """``prepare``: the tokenizer, then the shards (nlp_tutorials.sources.shards)."""
    from nlp_tutorials.sources.corpus import corpus_files, learn_tokenizer
    from nlp_tutorials.text.tokenization import load_tokenizer

    paths = corpus_files(settings.corpus)
    if settings.tokenizer_from:
        tokenizer = load_tokenizer(settings.tokenizer_from)
    else:
        tokenizer = learn_tokenizer(settings.tokenizer, settings.vocab_size, paths,
                                    settings.tokenizer_sample_mb)
    start_tensorflow()
    from nlp_tutorials.sources.shards import prepare_shards

    prepare_shards(settings.corpus, settings.output, settings.shards, tokenizer,
                   settings.max_len, settings.seed)


def finetune(config) -> None:
    """``bert finetune``: fine-tune on MRPC, report test scores, save the model."""
    start_tensorflow()
    from nlp_tutorials.training.finetuning import finetune as finetune_mrpc

    finetune_mrpc(config)


def predict(settings) -> None:
    """``bert predict``: one line per pair; on a malformed line, the pairs before it first."""
    if settings.input != "-" and not Path(settings.input).is_file():
        raise UserError(f"{settings.input}: no such file; expected a TSV of sentence pairs")
    start_tensorflow()
    from nlp_tutorials.training.finetuning import load_finetuned, predict as predict_pairs

    head, tokenizer, task = load_finetuned(settings.model_dir)
    if settings.input == "-":
        predict_pairs(head, tokenizer, task, sys.stdin, "<stdin>")
        return
    try:
        with open(settings.input, encoding="utf-8-sig") as lines:
            predict_pairs(head, tokenizer, task, lines, settings.input)
    except UnicodeDecodeError as err:
        raise UserError(f"{settings.input}: not UTF-8 text ({err.reason})") from None


def heads(settings) -> None:
    """``bert heads``: score, study, prune (nlp_tutorials.analysis.bertology)."""
    start_tensorflow()
    from nlp_tutorials.analysis.bertology import heads_command

    heads_command(settings.model_dir, settings.output_dir, settings.dev_size, settings.study,
                  settings.prune, settings.pruned_dir, settings.random_orders,
                  settings.recover_epochs)


def export_model(settings) -> None:
    """``bert export-model``: an existing version folder is refused before TensorFlow loads."""
    from nlp_tutorials.system.files import refuse_existing

    refuse_existing(Path(settings.output) / str(settings.version), settings.overwrite,
                    "--output")
    start_tensorflow()
    from nlp_tutorials.serving.savedmodel import export_model as export_saved_model

    export_saved_model(settings.model_dir, settings.output, settings.version,
                       settings.overwrite, settings.ids_only)


def generate(settings) -> None:
    """``gpt generate``: the prompt continued, greedily or by seeded sampling."""
    start_tensorflow()
    from nlp_tutorials.models.decoding import continue_text, greedy, sampler
    from nlp_tutorials.training.checkpoints import restore_model

    model, tokenizer = restore_model(settings.model_dir, "gpt")
    choose = (sampler(settings.temperature or 1.0, settings.top_k, settings.seed)
              if settings.sample else greedy)
    print(continue_text(model, tokenizer, settings.prompt, settings.max_new_tokens, choose))


def train_dates(config, options) -> None:
    """``transformer train``: learn the date task, then (unless --no-plots) draw attention."""
    start_tensorflow()
    from nlp_tutorials.training.seq2seq import train as train_date_model

    train_date_model(config)
    if not options.no_plots:
        pickle_path = export_date_attention(config.model_dir, EXPORT_EXAMPLES,
                                            default_pickle("transformer"))
        draw(pickle_path, RESULTS, 0, None, None, "transformer")


def translate(settings) -> None:
    """``transformer translate``: each date rewritten, one line each."""
    start_tensorflow()
    from nlp_tutorials.training.seq2seq import load, translate as translate_dates

    translations = translate_dates(load(settings.model_dir), settings.dates)
    for text, translation in zip(settings.dates, translations):
        print(f"{text} -> {translation}")


def export_dates(settings) -> None:
    """``transformer export``: the attention on held-out dates, pickled."""
    export_date_attention(settings.model_dir, settings.n, settings.output)


def export_date_attention(model_dir, n: int, output) -> Path:
    start_tensorflow()
    from nlp_tutorials.analysis.visual import export_date_attention as export_held_out
    from nlp_tutorials.training.seq2seq import load

    path = export_held_out(load(model_dir), n, output)
    print(f"attention of {n} held-out dates written to {path}")
    return path
