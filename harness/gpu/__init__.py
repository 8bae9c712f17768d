"""A lent GPU box: the offline wheel folder it installs from (``wheels``) and the quick check's README
(``quick_readme``); ``commands`` adds their ``python -m harness`` subcommands. Torch-free."""
