"""The local-vs-cloud decision, its confidence and the costs it rests on."""
