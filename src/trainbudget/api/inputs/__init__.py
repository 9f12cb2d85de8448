"""Reading a question: its options, their values and choices, the model, the layout and the search."""
