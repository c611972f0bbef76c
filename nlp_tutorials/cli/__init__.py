"""Command-line front-ends: ``python -m nlp_tutorials.bert|gpt <command>``.

Arguments are parsed and checked before TensorFlow is imported, so ``--help`` and argument
errors answer at once: flags become a run's config through
:func:`nlp_tutorials.config.config_from_args`, and only then does
:func:`nlp_tutorials.startup.start_tensorflow` load TensorFlow. Every user error prints one
line, ``<prog>: error: <what and why>``, and exits with status 2; Ctrl-C during training saves
a checkpoint and exits with status 130.
"""
import argparse
import functools
import signal
import sys
from pathlib import Path

from nlp_tutorials.training.config import (
    DateTrainConfig,
    FinetuneConfig,
    TrainConfig,
    config_from_args,
)
from nlp_tutorials.training.distribute import PRECISIONS, STRATEGIES, is_chief
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.startup import start_tensorflow

DEFAULT_EXPORT_EXAMPLES = 32


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) so it reads like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    value = _number(text, int, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float, "a positive number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def probability(text: str) -> float:
    value = _number(text, float, "a probability in [0, 1)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text}")
    return value


def _number(text, kind, expected):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def build_parser(model_name: str) -> argparse.ArgumentParser:
    """The parser of ``python -m nlp_tutorials.<model_name>``.

    Flags that set a config field default to None, so :func:`config_from_args` can tell a
    given flag from an absent one; their help gives the config's default.
    """
    defaults = TrainConfig(**train_defaults(model_name))
    parser = OneLineParser(prog=f"python -m nlp_tutorials.{model_name}",
                           description=f"Pre-train {model_name.upper()} on MRPC, export its "
                                       f"attention and plot it.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    add_train_command(commands, model_name, defaults)
    export = commands.add_parser("export", help="write attention matrices of MRPC test pairs "
                                                "to a pickle")
    add_export_flags(export.add_argument, defaults.model_dir, model_name, "test pairs")
    add_plot_command(commands, model_name)
    add_explore_command(commands, defaults.model_dir, model_name, "MRPC test pairs")
    add_prepare_command(commands)
    if model_name == "bert":
        add_finetune_commands(commands)
        add_heads_command(commands)
        add_export_model_command(commands)
    if model_name == "gpt":
        add_generate_command(commands, defaults.model_dir)
    return parser


def add_train_command(commands, model_name: str, defaults: TrainConfig):
    """``train``: pre-training, its flags named after :class:`TrainConfig`'s fields."""
    train = commands.add_parser("train", help=f"pre-train {model_name.upper()} on MRPC train")
    add = train.add_argument
    add("--steps", type=positive_int, help=f"optimisation steps (default {defaults.steps})")
    add("--batch-size", type=positive_int,
        help=f"sequences per step (default {defaults.batch_size})")
    add("--learning-rate", type=positive_float,
        help=f"peak AdamW learning rate, reached after 10%% warm-up, then decayed linearly "
             f"to 0 (default {defaults.learning_rate})")
    add("--dim", type=positive_int, help=f"model width (default {defaults.dim})")
    add("--layers", type=positive_int, help=f"Transformer layers (default {defaults.layers})")
    add("--heads", type=positive_int,
        help=f"attention heads; must divide --dim (default {defaults.heads})")
    add("--max-len", type=positive_int,
        help="tokens per sequence (default: the longest MRPC train pair)")
    add("--seed", type=non_negative_int, help=f"random seed (default {defaults.seed})")
    add("--nsp-mode", choices=("random", "paraphrase"),
        help="next-sentence task: 'random' (BERT's IsNext/NotNext, default) or "
             "'paraphrase' (the MRPC label)")
    add("--tokenizer", choices=("word", "wordpiece"),
        help="'word' (whole words, default) or 'wordpiece' (BERT's sub-words, a vocabulary "
             "learned from MRPC train)")
    add("--vocab-size", type=positive_int,
        help=f"WordPiece vocabulary size, special tokens and characters included "
             f"(default {defaults.vocab_size})")
    if model_name == "bert":
        add("--whole-word-mask", action="store_true", default=None,
            help="mask all pieces of a chosen word together (BERT's whole-word masking)")
    add("--dropout", type=probability, help=f"dropout rate (default {defaults.dropout})")
    add("--model-dir", help=f"where checkpoints, vocab and config go "
                            f"(default {defaults.model_dir})")
    add("--checkpoint-every", type=positive_int,
        help=f"steps between checkpoints (default {defaults.checkpoint_every})")
    add("--sample-every", type=positive_int,
        help=f"steps between printed example predictions (default {defaults.sample_every})")
    add("--jit", action="store_true", default=None, help="XLA-compile the training step")
    add_distribute_flags(add)
    add_corpus_flags(train)
    if model_name == "bert":
        add_init_from_flags(add)
    add("--resume", action="store_true",
        help="continue from the newest intact checkpoint in --model-dir; a larger --steps "
             "than the saved run's trains on to that step")
    add("--no-plots", action="store_true",
        help="skip the attention export and pictures at the end")


def add_corpus_flags(train):
    """``train --corpus`` / ``--data``: pre-train on your own text (docs/corpus.md)."""
    source = train.add_mutually_exclusive_group()
    source.add_argument("--corpus", metavar="PATH_OR_GLOB",
                        help="pre-train on this text instead of MRPC: one sentence a line, a "
                             "blank line between documents (google-research/bert's format), "
                             "read as a stream; quote a glob, e.g. 'books/*.txt'")
    source.add_argument("--data", metavar="DIR",
                        help="pre-train on the TFRecord shards `prepare` wrote into DIR "
                             "(tokenizer and max_len come from there)")
    train.add_argument("--tokenizer-sample-mb", type=positive_int,
                       help=f"with --corpus: learn the vocabulary from the corpus' first "
                            f"this many MB (default {TrainConfig().tokenizer_sample_mb})")


def add_prepare_command(commands):
    """``prepare``: tokenize a corpus once into TFRecord shards for ``train --data``."""
    prepare = commands.add_parser("prepare", help="tokenize a text corpus once into TFRecord "
                                                  "shards for `train --data`")
    add = prepare.add_argument
    add("--corpus", required=True, metavar="PATH_OR_GLOB",
        help="one sentence a line, a blank line between documents; quote a glob")
    add("--output", required=True, metavar="DIR", help="new folder for the shards")
    add("--shards", type=positive_int, default=1,
        help="number of shard files; at least the number of workers that will train (default 1)")
    add("--max-len", type=positive_int, default=128, help="tokens per sequence (default 128)")
    add("--tokenizer", choices=("word", "wordpiece"), default="word",
        help="tokenizer learned from the corpus (default word)")
    add("--vocab-size", type=positive_int, default=8000,
        help="most tokens in the learned vocabulary (default 8000)")
    sample_mb = TrainConfig().tokenizer_sample_mb
    add("--tokenizer-sample-mb", type=positive_int, default=sample_mb,
        help=f"learn the vocabulary from the corpus' first this many MB (default {sample_mb})")
    add("--tokenizer-from", metavar="MODEL_DIR",
        help="use this model's tokenizer (vocab.txt) instead of learning one")
    add("--seed", type=non_negative_int, default=1, help="pairing seed (default 1)")


def prepare(args) -> int:
    """``prepare``: the tokenizer, then the shards (nlp_tutorials.shards)."""
    from nlp_tutorials.sources.corpus import check_max_len, corpus_files, learn_tokenizer
    from nlp_tutorials.text.tokenization import load_tokenizer

    check_max_len(args.max_len)
    paths = corpus_files(args.corpus)
    if args.tokenizer_from:
        tokenizer = load_tokenizer(args.tokenizer_from)
    else:
        tokenizer = learn_tokenizer(args.tokenizer, args.vocab_size, paths,
                                    args.tokenizer_sample_mb)
    start_tensorflow()
    from nlp_tutorials.sources.shards import prepare_shards

    prepare_shards(args.corpus, args.output, args.shards, tokenizer, args.max_len, args.seed)
    return 0


def add_init_from_flags(add):
    """``bert train``'s continued pre-training flags (docs/pretrained.md)."""
    add("--init-from", metavar="DIR",
        help="continue pre-training a real BERT: a folder with config.json, vocab.txt and "
             "model.safetensors (HuggingFace) or bert_config.json, vocab.txt and "
             "bert_model.ckpt.* (Google); the model's size and vocabulary come from it, and "
             "the result is also written to <model-dir>/pretrained/ for finetune --init-from")
    add("--head-warmup-steps", type=non_negative_int, metavar="N",
        help="with --init-from: the first N steps train only the masked-LM and next-sentence "
             "heads, the encoder frozen (default: 10%% of --steps when the checkpoint has no "
             "pre-training heads, else 0); BERT's schedule then starts over for the rest")
    add("--head-learning-rate", type=positive_float,
        help=f"constant AdamW rate of the heads-only steps (default "
             f"{TrainConfig.head_learning_rate})")


def add_export_flags(add, model_dir: str, model_name: str, examples: str):
    """``export``'s flags: the trained model, how many examples, the pickle to write."""
    add("--model-dir", default=model_dir, help=f"trained model (default {model_dir})")
    add("--n", type=positive_int, default=DEFAULT_EXPORT_EXAMPLES,
        help=f"{examples} to run (default {DEFAULT_EXPORT_EXAMPLES})")
    add("--output", default=default_pickle(model_name),
        help=f"pickle to write (default {default_pickle(model_name)})")


def add_distribute_flags(add):
    """--strategy, --cpu-replicas, --precision (see docs/scaling.md)."""
    add("--strategy", choices=STRATEGIES,
        help="where the step runs: 'default' (one device), 'mirrored' (every local GPU, or "
             "--cpu-replicas logical CPUs), 'multiworker' (the cluster in TF_CONFIG), 'tpu'; "
             "--batch-size is the global batch, split across replicas (default default)")
    add("--cpu-replicas", type=positive_int,
        help="with --strategy mirrored on a machine without GPUs: split the CPU into this "
             "many logical devices, one replica each (default 1)")
    add("--precision", choices=PRECISIONS,
        help="'float32' (default), or Keras mixed precision: 'mixed_float16' (with loss "
             "scaling; GPUs) or 'mixed_bfloat16' (TPUs, recent GPUs and CPUs)")


def add_plot_command(commands, model_name: str):
    plot = commands.add_parser("plot", help="draw attention heatmaps from an exported pickle")
    plot.add_argument("--input", default=default_pickle(model_name),
                      help=f"pickle written by export (default {default_pickle(model_name)})")
    plot.add_argument("--output-dir", default="visual/results",
                      help="where PNGs go (default visual/results)")
    plot.add_argument("--case", type=non_negative_int, default=0,
                      help="which example to draw (default 0)")
    plot.add_argument("--layer", type=non_negative_int,
                      help="layer of the line view (default: the last)")
    plot.add_argument("--head", type=non_negative_int, help="head of the line view (default 0)")


def add_explore_command(commands, model_dir: str, model_name: str, examples: str):
    """``explore``: one self-contained HTML page of the attention (nlp_tutorials.explorer)."""
    output = f"visual/results/{model_name}_explorer.html"
    explore = commands.add_parser("explore", help="write one HTML page to browse the attention: "
                                                  "head, model and neuron views")
    add = explore.add_argument
    add("--model-dir", help=f"model to run: trained (default {model_dir})"
                            + (" or fine-tuned (model.keras)" if model_name == "bert" else ""))
    add("--input", metavar="PICKLE", help="an attention pickle written by export, instead of "
                                          "running a model")
    add("--n", type=positive_int, help=f"{examples} to include (default: 8 when running a "
                                       f"model, every one in --input)")
    add("--output", default=output, help=f"page to write (default {output})")
    add("--example", type=non_negative_int, default=0, help="example shown first (default 0)")
    add("--layer", type=non_negative_int, default=0, help="layer shown first (default 0)")
    add("--head", type=non_negative_int, default=0, help="head shown first (default 0)")
    add("--view", choices=("head", "model", "neuron"), default="head",
        help="view shown first (default head)")
    add("--importance", metavar="JSON",
        help="head_importance.json (from `bert heads`) to show in the model view (default: "
             "the one beside the model or pickle, if there is one)")


def explore(model_name: str, args) -> None:
    if args.input is not None and args.model_dir is not None:
        raise UserError(f"--input {args.input} and --model-dir {args.model_dir}: expected "
                        f"one source of attention, not both")
    from nlp_tutorials.analysis.explorer import explore as write_page

    model_dir = args.model_dir or (DateTrainConfig().model_dir if model_name == "transformer"
                                   else train_defaults(model_name)["model_dir"])
    path = write_page(model_name, args.output, None if args.input else model_dir, args.input,
                      args.n, args.example, args.layer, args.head, args.view, args.importance)
    print(f"explorer page written to {path}")


def add_finetune_commands(commands):
    """``finetune`` and ``predict``: BERT on MRPC paraphrase detection."""
    defaults = FinetuneConfig()
    finetune = commands.add_parser("finetune", help="fine-tune the pre-trained BERT on MRPC "
                                                    "paraphrase detection")
    add = finetune.add_argument
    add("--model-dir", help=f"pre-trained model from `train` (default {defaults.model_dir})")
    add("--from-scratch", action="store_true", default=None,
        help="start from random weights instead")
    add("--init-from", metavar="DIR",
        help="start from a real pretrained BERT instead: a folder with config.json, vocab.txt "
             "and model.safetensors (HuggingFace) or bert_config.json, vocab.txt and "
             "bert_model.ckpt.* (Google)")
    add("--max-len", type=positive_int,
        help=f"tokens per pair; longer pairs are truncated, the longer sentence first "
             f"(default {defaults.max_len}, capped by the model's positions)")
    add("--output-dir", help=f"where the fine-tuned model goes (default {defaults.output_dir})")
    add("--epochs", type=positive_int,
        help=f"passes over the train pairs (default {defaults.epochs})")
    add("--batch-size", type=positive_int, help=f"pairs per step (default {defaults.batch_size})")
    add("--learning-rate", type=positive_float,
        help=f"peak AdamW rate, 10%% warm-up then linear decay (default "
             f"{defaults.learning_rate})")
    add("--seed", type=non_negative_int, help=f"first seed (default {defaults.seed})")
    add("--seeds", type=positive_int,
        help="number of seeds to run; the test result is reported as mean ± std "
             f"(default {defaults.seeds})")
    add("--dev-size", type=non_negative_int,
        help=f"last train pairs held out to pick the best epoch; 0 trains on every pair and "
             f"keeps the last epoch (default {defaults.dev_size})")
    add("--no-swap", dest="swap_augment", action="store_false", default=None,
        help="do not add each train pair in the other sentence order")
    add("--pooling", choices=("cls", "mean"),
        help="what the classifier reads: 'cls' (BERT's pooled [CLS] vector, default) or "
             "'mean' (the average of the final token vectors, as sentence-embedding models "
             "such as all-MiniLM-L6-v2 were trained)")
    add_distribute_flags(add)

    predict = commands.add_parser("predict", help="label sentence pairs with the fine-tuned "
                                                  "model (TSV: s1<TAB>s2, or MRPC rows)")
    predict.add_argument("input", nargs="?", default="-",
                         help="TSV file, or - for standard input (default -)")
    predict.add_argument("--model-dir", default=defaults.output_dir,
                         help=f"fine-tuned model (default {defaults.output_dir})")


def share(text: str) -> float:
    value = _number(text, float, "a share of the heads in [0, 1)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share of the heads in [0, 1), got {text}")
    return value


def add_heads_command(commands):
    """``heads``: which attention heads a fine-tuned BERT needs (nlp_tutorials.bertology)."""
    default_dir = FinetuneConfig().output_dir
    heads = commands.add_parser("heads", help="score each attention head of a fine-tuned model "
                                              "(importance, entropy); mask or prune the least "
                                              "important")
    add = heads.add_argument
    add("--model-dir", default=default_dir,
        help=f"fine-tuned model from `finetune` (default {default_dir}); head_importance.json "
             f"is written beside it")
    add("--output-dir", default="visual/results", help="pictures (default visual/results)")
    dev_size = FinetuneConfig().dev_size
    add("--dev-size", type=positive_int, default=dev_size,
        help=f"last MRPC train pairs the importance is measured on (default {dev_size}, "
             f"finetune's dev)")
    add("--study", action="store_true",
        help="also mask 0%%, 10%%, ..., 90%% of the heads, least important first and in random "
             "orders, scoring the MRPC test split each time")
    add("--random-orders", type=positive_int, default=3,
        help="random orders the study averages as its control (default 3)")
    add("--prune", type=share, metavar="SHARE",
        help="write a copy without this share of the heads, least important first, each layer "
             "keeping one (e.g. 0.4)")
    add("--pruned-dir", help="where the pruned model goes (default <model-dir>_pruned<percent>)")
    add("--recover-epochs", type=non_negative_int, default=0,
        help="with --prune: fine-tune the pruned model again for this many passes over the "
             "MRPC train pairs at lr 2e-5 (default 0)")


def add_export_model_command(commands):
    """``export-model``: the fine-tuned model as a SavedModel (nlp_tutorials.serving)."""
    default_dir = FinetuneConfig().output_dir
    export = commands.add_parser("export-model", help="write the fine-tuned model as a "
                                                      "SavedModel for TensorFlow Serving")
    add = export.add_argument
    add("--model-dir", default=default_dir,
        help=f"fine-tuned model from `finetune` (default {default_dir})")
    add("--output", required=True, help="model base folder; the SavedModel goes into "
                                        "OUTPUT/VERSION")
    add("--version", type=positive_int, default=1, help="version folder to write (default 1)")
    add("--overwrite", action="store_true", help="replace an existing version folder")
    add("--ids-only", action="store_true",
        help="export predict_ids only, without tensorflow-text's ops (for servers without them, "
             "e.g. the stock tensorflow/serving image)")


def add_generate_command(commands, model_dir: str):
    """``gpt generate``: continue a prompt with the pre-trained GPT."""
    generate = commands.add_parser("generate", help="continue a prompt with the trained GPT")
    add = generate.add_argument
    add("--prompt", required=True, help='the start of a sentence, e.g. "the company said"')
    add("--max-new-tokens", type=positive_int, default=20,
        help="stop after this many new tokens if [SEP] has not come first (default 20)")
    add("--sample", action="store_true",
        help="draw each token at random from the model's distribution instead of taking the "
             "most likely one (greedy, the default)")
    add("--top-k", type=positive_int, help="with --sample: draw only from the k most likely "
                                           "tokens (default: all)")
    add("--temperature", type=positive_float,
        help="with --sample: divide the logits by this; < 1 is more conservative, > 1 more "
             "adventurous (default 1.0)")
    add("--seed", type=non_negative_int, default=0, help="seed of --sample (default 0)")
    add("--model-dir", default=model_dir, help=f"trained GPT (default {model_dir})")


def default_pickle(model_name: str) -> str:
    return f"visual/tmp/{model_name}_attention_matrix.pkl"


def train_defaults(model_name: str) -> dict:
    """The TrainConfig fields ``python -m nlp_tutorials.<model_name> train`` sets itself."""
    return {"model_type": model_name, "model_dir": f"visual/models/{model_name}"}


def main(model_name: str, argv=None) -> int:
    """Run one command of ``python -m nlp_tutorials.<model_name>``; returns the exit status.

    A UserError is printed as one line, ``<prog> <command>: error: <message>``, status 2.
    """
    if model_name == "transformer":
        parser, run = build_transformer_parser(), run_transformer_command
    else:
        parser, run = build_parser(model_name), functools.partial(run_command, model_name)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        return 2


def run_command(model_name: str, args) -> int:
    """Run the parsed command of ``python -m nlp_tutorials.<model_name>``; the exit status."""
    if args.command == "train":
        return train(model_name, args)
    if args.command == "prepare":
        return prepare(args)
    if args.command == "export":
        start_tensorflow()
        from nlp_tutorials.training.checkpoints import restore_model

        model, tokenizer = restore_model(args.model_dir, model_name)
        export(model, tokenizer, args.n, args.output)
    elif args.command == "finetune":
        config, _ = config_from_args(FinetuneConfig, args)
        start_tensorflow()
        from nlp_tutorials.training.finetuning import finetune

        finetune(config)
    elif args.command == "predict":
        return predict(args)
    elif args.command == "generate":
        generate(args)
    elif args.command == "heads":
        if args.recover_epochs and args.prune is None:
            raise UserError(f"--recover-epochs {args.recover_epochs}: only with --prune; "
                            f"expected --prune SHARE as well")
        start_tensorflow()
        from nlp_tutorials.analysis.bertology import heads_command

        heads_command(args.model_dir, args.output_dir, args.dev_size, args.study, args.prune,
                      args.pruned_dir, args.random_orders, args.recover_epochs)
    elif args.command == "plot":
        plot(args.input, args.output_dir, args.case, args.layer, args.head, model_name)
    elif args.command == "explore":
        explore(model_name, args)
    elif args.command == "export-model":
        export_model(args)
    return 0


def export_model(args):
    """``export-model``: an existing version folder is refused before TensorFlow loads."""
    from nlp_tutorials.system.files import refuse_existing

    refuse_existing(Path(args.output) / str(args.version), args.overwrite, "--output")
    start_tensorflow()
    from nlp_tutorials.serving.savedmodel import export_model as export_saved_model

    export_saved_model(args.model_dir, args.output, args.version, args.overwrite, args.ids_only)


def train(model_name: str, args) -> int:
    """``train``: pre-train, then (unless --no-plots) export the model's attention and draw it."""
    config, given = config_from_args(TrainConfig, args, **train_defaults(model_name))
    if "head_learning_rate" in given and not config.init_from:
        raise UserError(f"--head-learning-rate {config.head_learning_rate}: only with "
                        f"--init-from (it is the rate of the heads-only warm-up steps)")
    start_tensorflow()
    from nlp_tutorials.training.pretraining import pretrain

    # A shell starts background jobs with SIGINT ignored, and Python keeps that; restore
    # Ctrl-C (KeyboardInterrupt) so an interrupt always saves a checkpoint first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run = pretrain(config, given, resume=args.resume)
    except KeyboardInterrupt:
        print("interrupted: checkpoint saved; continue with --resume", file=sys.stderr)
        return 130
    # Only the chief of a multi-worker run draws: the others hold copies of its weights.
    if not args.no_plots and is_chief(config.strategy):
        pickle_path = export(run.model, run.tokenizer, DEFAULT_EXPORT_EXAMPLES,
                             default_pickle(model_name))
        plot(pickle_path, "visual/results", 0, None, None, model_name)
    return 0


def predict(args) -> int:
    """Print one line per pair; on a malformed line, the pairs before it are printed first."""
    if args.input != "-" and not Path(args.input).is_file():
        raise UserError(f"{args.input}: no such file; expected a TSV of sentence pairs")
    start_tensorflow()
    from nlp_tutorials.training.finetuning import load_finetuned, predict as predict_pairs

    head, tokenizer, task = load_finetuned(args.model_dir)
    if args.input == "-":
        predict_pairs(head, tokenizer, task, sys.stdin, "<stdin>")
        return 0
    try:
        with open(args.input, encoding="utf-8-sig") as lines:
            predict_pairs(head, tokenizer, task, lines, args.input)
    except UnicodeDecodeError as err:
        raise UserError(f"{args.input}: not UTF-8 text ({err.reason})") from None
    return 0


def export(model, tokenizer, n: int, output) -> Path:
    """Pickle the attention of a GPT or BERT on the first ``n`` MRPC test pairs."""
    from nlp_tutorials.analysis.visual import export_attention

    path = export_attention(model, tokenizer, n, output)
    print(f"attention of {n} test pairs written to {path}")
    return path


def plot(pickle_path, output_dir, case, layer, head, model_name):
    from nlp_tutorials.analysis.visual import plot_all

    paths = plot_all(pickle_path, output_dir, case=case, layer=layer, head=head,
                     model_name=model_name)
    print("pictures written:\n" + "\n".join(f"  {p}" for p in paths))


def generate(args):
    if not args.prompt.strip():
        raise UserError("--prompt is empty; expected some text, e.g. --prompt \"the company said\"")
    for flag, value in (("--top-k", args.top_k), ("--temperature", args.temperature)):
        if value is not None and not args.sample:
            raise UserError(f"{flag} needs --sample (greedy decoding always takes the most "
                            f"likely token)")
    start_tensorflow()
    from nlp_tutorials.training.checkpoints import restore_model
    from nlp_tutorials.models.decoding import continue_text, greedy, sampler

    model, tokenizer = restore_model(args.model_dir, "gpt")
    choose = (sampler(args.temperature or 1.0, args.top_k, args.seed) if args.sample
              else greedy)
    print(continue_text(model, tokenizer, args.prompt, args.max_new_tokens, choose))


def build_transformer_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m nlp_tutorials.transformer``: the date-translation model."""
    defaults = DateTrainConfig()
    parser = OneLineParser(prog="python -m nlp_tutorials.transformer",
                           description="Train the encoder-decoder Transformer to rewrite dates "
                                       "(98-02-26 -> 26/Feb/1998), translate, export, plot.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    train = commands.add_parser("train", help="learn the date task; report held-out exact match")
    add = train.add_argument
    add("--steps", type=positive_int, help=f"optimisation steps (default {defaults.steps})")
    add("--batch-size", type=positive_int,
        help=f"dates per step (default {defaults.batch_size})")
    add("--learning-rate", type=positive_float,
        help=f"peak AdamW rate, 10%% warm-up then linear decay (default "
             f"{defaults.learning_rate})")
    add("--dim", type=positive_int, help=f"model width (default {defaults.dim})")
    add("--layers", type=positive_int,
        help=f"layers in each stack (default {defaults.layers})")
    add("--heads", type=positive_int,
        help=f"attention heads; must divide --dim (default {defaults.heads})")
    add("--dropout", type=probability, help=f"dropout rate (default {defaults.dropout})")
    add("--seed", type=non_negative_int,
        help=f"weights and batch order (the held-out dates are fixed) (default {defaults.seed})")
    add("--model-dir",
        help=f"where config.json and the weights go (default {defaults.model_dir})")
    add("--no-plots", action="store_true",
        help="skip the attention export and pictures at the end")

    translate = commands.add_parser("translate", help="rewrite YY-MM-DD dates as DD/Mon/YYYY")
    translate.add_argument("dates", nargs="+", help="dates such as 03-11-29")
    translate.add_argument("--model-dir", default=defaults.model_dir,
                           help=f"trained model (default {defaults.model_dir})")

    export = commands.add_parser("export", help="write attention matrices of held-out dates "
                                                "to a pickle")
    add_export_flags(export.add_argument, defaults.model_dir, "transformer", "held-out dates")
    add_plot_command(commands, "transformer")
    add_explore_command(commands, defaults.model_dir, "transformer", "held-out dates")
    return parser


def run_transformer_command(args) -> int:
    """Run the parsed command of ``python -m nlp_tutorials.transformer``; the exit status."""
    if args.command == "train":
        config, _ = config_from_args(DateTrainConfig, args)
        start_tensorflow()
        from nlp_tutorials.training.seq2seq import train as train_dates

        train_dates(config)
        if not args.no_plots:
            pickle_path = export_seq2seq(config.model_dir, DEFAULT_EXPORT_EXAMPLES,
                                         default_pickle("transformer"))
            plot(pickle_path, "visual/results", 0, None, None, "transformer")
    elif args.command == "translate":
        from nlp_tutorials.tasks.dates import parse_source

        for text in args.dates:
            parse_source(text)  # a malformed date fails here, before TensorFlow loads
        start_tensorflow()
        from nlp_tutorials.training.seq2seq import load, translate

        for text, translation in zip(args.dates, translate(load(args.model_dir), args.dates)):
            print(f"{text} -> {translation}")
    elif args.command == "export":
        export_seq2seq(args.model_dir, args.n, args.output)
    elif args.command == "plot":
        plot(args.input, args.output_dir, args.case, args.layer, args.head, "transformer")
    elif args.command == "explore":
        explore("transformer", args)
    return 0


def export_seq2seq(model_dir, n: int, output) -> Path:
    start_tensorflow()
    from nlp_tutorials.analysis.visual import export_date_attention
    from nlp_tutorials.training.seq2seq import load

    path = export_date_attention(load(model_dir), n, output)
    print(f"attention of {n} held-out dates written to {path}")
    return path
