"""Answering a question: the estimate and plan documents, their ranges, reliability and quotes."""
