"""What `train --sample-every` prints now and then: GPT's continuation of a batch's first words
(BERT's masked-token guesses are checked with its training run, tests/training/test_training.py)."""
import numpy as np

from nlp_tutorials.text.tokenization import WordTokenizer

SENTENCE = "the company said its shares rose on monday after the report"


def test_gpt_continues_the_first_words_of_a_training_sequence_greedily(tiny_gpt):
    import tensorflow as tf

    from nlp_tutorials.training.pretraining_evaluation import describe_continuation

    # 5 special tokens and 35 words: every id the tiny GPT (40 of them) may choose has a token.
    tokenizer = WordTokenizer.build([SENTENCE, " ".join(f"word{i}" for i in range(25))])
    assert tokenizer.vocab_size == tiny_gpt.config.vocab_size
    ids = tokenizer.convert_tokens_to_ids(["[CLS]", *SENTENCE.split(), "[SEP]"])
    padded = ids + [tokenizer.pad_id] * 4
    batch = {"input_ids": tf.constant([padded, padded], tf.int32)}
    shown = describe_continuation(tiny_gpt, tokenizer, batch, prompt_words=3, new_tokens=4)

    # Independently: the whole model run on the prefix again for each next token, arg-maxed.
    prefix, chosen = ids[:4], []
    for _ in range(4):
        outputs = tiny_gpt({"input_ids": tf.constant([prefix])}, training=False)
        logits = tiny_gpt.lm_head(outputs["sequence_output"],
                                  tiny_gpt.embeddings.word_embeddings)
        chosen.append(int(np.argmax(logits.numpy()[0, -1])))
        prefix = prefix + chosen[-1:]
        if chosen[-1] == tokenizer.sep_id:
            break
    continued = " ".join(tokenizer.convert_ids_to_tokens(chosen))
    assert shown == f"  prompt:    the company said\n  continued: {continued}"
