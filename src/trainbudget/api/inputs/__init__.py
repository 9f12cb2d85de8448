"""Reading a question: its options, values and choices, the model, the layout, the search."""
