"""tokenizer_config.json's vocab_size is a positive integer, or the file is named as wrong."""
import json

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import WordTokenizer, load_tokenizer


@pytest.mark.parametrize("vocab_size, expected", [
    ("10", 'vocab_size is "10"; expected a positive integer'),
    (True, "vocab_size is true; expected a positive integer"),
    (10.0, "vocab_size is 10.0; expected a positive integer"),
    (9, "vocab_size is 9 but"),
])
def test_a_saved_vocab_size_that_is_no_count_of_the_vocabulary_is_named(tmp_path, vocab_size,
                                                                       expected):
    tokenizer = WordTokenizer.build(["the cat sat on the mat"])
    tokenizer.save(tmp_path)
    assert tokenizer.vocab_size == 10  # five special tokens and five words
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "vocab_size": vocab_size}))
    with pytest.raises(UserError) as info:
        load_tokenizer(tmp_path)
    assert str(info.value).startswith(f"{path}: {expected}"), str(info.value)
