"""What the API returns: the result objects, how they show themselves, and their engine configs."""
