"""The tokenizers, where they have always been imported from:
``from nlp_tutorials.tokenization import WordPieceTokenizer`` (defined in
:mod:`nlp_tutorials.text.tokenization`)."""
from nlp_tutorials.text.tokenization import (
    Tokenizer,
    WordPieceTokenizer,
    WordTokenizer,
    load_tokenizer,
)

__all__ = ["Tokenizer", "WordPieceTokenizer", "WordTokenizer", "load_tokenizer"]
