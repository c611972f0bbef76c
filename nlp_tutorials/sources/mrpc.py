"""Pre-training on MRPC's sentence pairs: the text (:class:`MrpcText`) and its examples,
masked LM + next sentence (:class:`MrpcPretrainingData`).

The pairs are MRPC's examples as its task reads them
(:class:`~nlp_tutorials.tasks.glue.TextExample`: ``text``, ``pair``, and ``label`` "1" for a
paraphrase, "0" not), read by the caller: ``tasks/`` sits above this folder.

Numpy epoch by epoch; TensorFlow only in :meth:`MrpcPretrainingData.dataset` and
:meth:`MrpcPretrainingData.batches` (what the training loop reads, as from every source:
:class:`~nlp_tutorials.sources.source.PretrainingSource`).
"""
import dataclasses
import itertools

import numpy as np

from nlp_tutorials.sources.source import (
    HELD_OUT_SEED_OFFSET,
    PretrainingText,
    TextSettings,
    build_tokenizer,
    refuse_vocab_size_without_wordpiece,
    trimmed_batches,
)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.masking import default_max_predictions, mask_with_tokenizer, num_to_mask
from nlp_tutorials.text.nsp import NSP_MODES, check_nsp_mode, nsp_pairing
from nlp_tutorials.text.tokenization import pad_ragged


def pair_tokens(tokenizer, pairs) -> list[tuple[list[str], list[str]]]:
    """(first sentence's tokens, second's) of every pair."""
    return [(tokenizer.tokenize(p.text), tokenizer.tokenize(p.pair)) for p in pairs]


def longest_tokenized_pair(tokens) -> int:
    """Tokens in the longest ``[CLS] a [SEP] b [SEP]`` of ``tokens``' pairs."""
    return max(len(a) + len(b) for a, b in tokens) + 3


def id_matrices(tokenizer, tokens):
    """Zero-padded ids and lengths of the first and second sentences: ids_a, len_a, ids_b, len_b."""
    ids_a, len_a = pad_ragged([tokenizer.convert_tokens_to_ids(a) for a, _ in tokens])
    ids_b, len_b = pad_ragged([tokenizer.convert_tokens_to_ids(b) for _, b in tokens])
    return ids_a, len_a, ids_b, len_b


class MrpcPretrainingData:
    """BERT pre-training examples (masked LM + next sentence) from MRPC pairs, epoch by epoch.

    Sentences are tokenized once here; each epoch then pairs, packs, masks and shuffles them
    with numpy alone, fresh every epoch but reproducible: epoch k draws from a generator seeded
    with (seed, k). ``whole_word_mask`` masks all pieces of a chosen word together (see
    :func:`mask_tokens`).
    """

    input_pipelines = 1  # every process feeds the whole global batch

    def __init__(self, tokenizer, pairs, max_len=None, nsp_mode=NSP_MODES[0], max_predictions=None,
                 seed=0, mask_prob=0.15, whole_word_mask=False):
        if not pairs:
            raise UserError("no sentence pairs to pre-train on")
        check_nsp_mode(nsp_mode)
        if not isinstance(seed, int) or seed < 0:
            raise UserError(f"seed={seed!r}: expected a non-negative integer")
        if not 0.0 < mask_prob <= 1.0:
            raise UserError(f"mask_prob={mask_prob!r}: expected a probability in (0, 1]")
        self.tokenizer = tokenizer
        self.nsp_mode = nsp_mode
        self.seed = seed
        self.mask_prob = mask_prob
        # Whole words need the tokenizer's ## pieces; a word-level one has none (words = tokens).
        self._continuation_ids = tokenizer.continuation_ids if whole_word_mask else None
        tokens = pair_tokens(tokenizer, pairs)
        self.max_len = longest_tokenized_pair(tokens) if max_len is None else max_len
        if not isinstance(self.max_len, int) or self.max_len < 3:
            raise UserError(f"max_len={self.max_len!r}: expected an integer of at least 3")
        self.max_predictions = (default_max_predictions(self.max_len, mask_prob)
                                if max_predictions is None else max_predictions)
        if not isinstance(self.max_predictions, int) or self.max_predictions < 1:
            raise UserError(
                f"max_predictions={self.max_predictions!r}: expected a positive integer")
        self._ids_a, self._len_a, self._ids_b, self._len_b = id_matrices(tokenizer, tokens)
        # nsp_mode "paraphrase" learns MRPC's own label: 1 a paraphrase, 0 not.
        self._labels = np.array([int(p.label) for p in pairs], dtype=np.int32)
        # Fail now rather than mid-training: the most real tokens any pairing can give.
        most = min(self.max_len - 3, int(self._len_a.max() + self._len_b.max()))
        needed = int(num_to_mask(most, mask_prob))
        if needed > self.max_predictions:
            raise UserError(f"max_predictions={self.max_predictions} is too small for max_len="
                            f"{self.max_len}; expected at least {needed}")

    @property
    def num_examples(self) -> int:
        return len(self._labels)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches in one epoch (the last partial batch is dropped)."""
        if not isinstance(batch_size, int) or not 1 <= batch_size <= self.num_examples:
            raise UserError(f"batch_size={batch_size!r}: expected an integer from 1 to "
                            f"{self.num_examples} (the number of examples)")
        return self.num_examples // batch_size

    def describe_epoch(self, batch_size: int) -> str:
        return f"{self.steps_per_epoch(batch_size)} steps per epoch"

    def epoch(self, rng_or_epoch_index, masked: bool = True, shuffle: bool = True) -> dict:
        """One epoch of examples, as numpy arrays with n = number of pairs.

        Args:
            rng_or_epoch_index: an epoch number k (uses the generator seeded with (seed, k)) or a
                numpy.random.Generator.
            masked: apply BERT's masking; False gives clean ids for next-token (GPT) training.
            shuffle: put the examples in a random order.
        Returns:
            ``input_ids`` [n, max_len] int32, ``token_type_ids`` [n, max_len] int32,
            ``nsp_labels`` [n] int32 (see :func:`nsp_pairing`) and, when masked, ``mlm_positions``,
            ``mlm_ids`` [n, max_predictions] int32 and ``mlm_weights`` [n, max_predictions]
            float32 (see :func:`mask_tokens`).
        """
        rng = rng_or_epoch_index
        if not isinstance(rng, np.random.Generator):
            if int(rng) < 0:
                raise UserError(f"epoch index {rng} is negative")
            rng = np.random.default_rng([self.seed, int(rng)])
        second, nsp_labels = nsp_pairing(self.num_examples, self.nsp_mode, rng, self._labels)
        order = rng.permutation(self.num_examples) if shuffle else np.arange(self.num_examples)
        second = second[order]
        input_ids, token_type_ids = self.tokenizer.pack(
            self._ids_a[order], self._len_a[order], self._ids_b[second], self._len_b[second],
            self.max_len)
        examples = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                    "nsp_labels": nsp_labels[order]}
        if masked:
            examples.update(mask_with_tokenizer(
                self.tokenizer, input_ids, rng, self.max_predictions, self.mask_prob,
                self._continuation_ids))
        return examples

    def dataset(self, batch_size: int, masked: bool = True, repeat: bool = True):
        """A tf.data.Dataset of dict batches of :meth:`epoch` arrays, batch_size rows each.

        Shapes are static ([batch_size, max_len], ...); each epoch's last partial batch is
        dropped. ``repeat=True`` runs epoch 0, 1, 2, ... forever; ``repeat=False`` yields one
        epoch per pass, and each new pass (e.g. each Keras epoch) moves on to the next epoch
        number, so masking is never repeated. Two datasets with the same seed are identical.
        """
        import tensorflow as tf

        steps = self.steps_per_epoch(batch_size)
        spec = {"input_ids": tf.TensorSpec((batch_size, self.max_len), tf.int32),
                "token_type_ids": tf.TensorSpec((batch_size, self.max_len), tf.int32),
                "nsp_labels": tf.TensorSpec((batch_size,), tf.int32)}
        if masked:
            predictions = (batch_size, self.max_predictions)
            spec.update(mlm_positions=tf.TensorSpec(predictions, tf.int32),
                        mlm_ids=tf.TensorSpec(predictions, tf.int32),
                        mlm_weights=tf.TensorSpec(predictions, tf.float32))
        next_epoch = itertools.count()

        def batches():
            while True:
                examples = self.epoch(next(next_epoch), masked)
                for start in range(0, steps * batch_size, batch_size):
                    yield {key: value[start:start + batch_size] for key, value in examples.items()}
                if not repeat:
                    return

        return tf.data.Dataset.from_generator(batches, output_signature=spec).prefetch(
            tf.data.AUTOTUNE)

    def batches(self, batch_size: int, masked: bool = True, start: int = 0,
                length_multiple: int = 1):
        """Endless trimmed batches of :meth:`dataset` from step ``start + 1`` on; see
        :meth:`~nlp_tutorials.sources.source.PretrainingSource.batches`."""
        return trimmed_batches(self.dataset(batch_size, masked).skip(start),
                               self.tokenizer.pad_id, length_multiple)


class HeldOutPairs:
    """Sentence pairs held out of a run's train pairs, on which it is scored (``described``
    names them: MRPC's test split for an MRPC run): packed as in training (the same vocabulary,
    words it never saw [UNK]; the same max_len, longer pairs truncated longest-first) and
    masked once; the baseline's masks are the train pairs' first epoch."""

    def __init__(self, tokenizer, settings: TextSettings, train_pairs, test_pairs,
                 described: str):
        self.tokenizer, self.settings = tokenizer, settings
        self.train_pairs, self.test_pairs = train_pairs, test_pairs
        self.described = described

    def batches(self, batch_size: int, masked: bool = True) -> list[dict]:
        test = MrpcPretrainingData(self.tokenizer, self.test_pairs, max_len=self.settings.max_len,
                                   nsp_mode=self.settings.nsp_mode,
                                   seed=self.settings.seed + HELD_OUT_SEED_OFFSET)
        return list(test.dataset(batch_size, masked=masked, repeat=False))

    def train_masked_ids(self, batch_size: int) -> np.ndarray:
        train = MrpcPretrainingData(self.tokenizer, self.train_pairs,
                                    max_len=self.settings.max_len, seed=self.settings.seed).epoch(0)
        return train["mlm_ids"][train["mlm_weights"] > 0]


class MrpcText(PretrainingText):
    """MRPC's train pairs, and its test pairs to score the run on (both read once by the
    caller: ``tasks/`` sits above this folder): the tokenizer's text, the default max_len (the
    longest train pair), the pre-training pairs, and the held-out text
    (:class:`HeldOutPairs`)."""

    def __init__(self, train_pairs, test_pairs):
        self.train_pairs, self.test_pairs = train_pairs, test_pairs

    def new_tokenizer(self, settings: TextSettings):
        """A tokenizer whose vocabulary comes from the TRAIN split only, so test words stay
        unknown; max_len the longest pair unless given."""
        refuse_vocab_size_without_wordpiece(settings)
        tokenizer = build_tokenizer(settings.tokenizer, settings.vocab_size,
                                    [s for p in self.train_pairs for s in (p.text, p.pair)])
        if not settings.max_len:
            settings = dataclasses.replace(settings, max_len=self.default_max_len(tokenizer))
        return tokenizer, settings

    def default_max_len(self, tokenizer) -> int:
        return longest_tokenized_pair(pair_tokens(tokenizer, self.train_pairs))

    def source(self, settings: TextSettings, tokenizer, worker: tuple,
               printer) -> MrpcPretrainingData:
        """Every process feeds the whole batch from all the pairs (``worker`` is not read)."""
        return MrpcPretrainingData(tokenizer, self.train_pairs, max_len=settings.max_len,
                                   nsp_mode=settings.nsp_mode, seed=settings.seed,
                                   whole_word_mask=settings.whole_word_mask)

    def held_out(self, settings: TextSettings, tokenizer) -> HeldOutPairs:
        return HeldOutPairs(tokenizer, settings, self.train_pairs, self.test_pairs,
                            "MRPC's test split")
