"""Text to token ids, per model family: input layouts, special tokens, truncation, tokenizer loading."""
