"""Fingerprint quality: precision, recall and F1 per Hamming distance on labelled pairs."""
