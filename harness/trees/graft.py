"""Trees on the host: a tree a model-free drafter builds token by token (stand), and trees that chains are merged
into: retrieved continuations grafted onto a drafter's tree (reader), the accepted text grafted onto a tree
another drafter did not propose (hedgespec)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.backend.device import index_on
from harness.trees.tree import TokenTree


@dataclass
class HostTree:
    """A token tree's tokens, parents and draft distributions as host lists."""

    tokens: list[int]
    parents: list[int]
    probs: list[torch.Tensor | None]

    @classmethod
    def of(cls, tree: TokenTree) -> HostTree:
        return cls.of_each([tree])[0]

    @classmethod
    def of_each(cls, trees: list[TokenTree]) -> list[HostTree]:
        """Every tree on the host, their tokens read in one go (one read however many trees)."""
        for tree in trees:
            tree.resolve()  # a drafter's tree may still have its shape on the device
        tokens = torch.cat([tree.tokens.reshape(-1) for tree in trees]).tolist()
        hosts, start = [], 0
        for tree in trees:
            hosts.append(cls(tokens[start:start + tree.size], list(tree.parents), list(tree.draft_probs)))
            start += tree.size
        return hosts

    def path_tokens(self, node: int) -> list[int]:
        """The tokens from below the root down to ``node``."""
        path = []
        while node > 0:
            path.append(self.tokens[node])
            node = self.parents[node]
        return path[::-1]

    def child_with(self, node: int, token: int) -> int | None:
        return next((kid for kid in range(node + 1, len(self.tokens))
                     if self.parents[kid] == node and self.tokens[kid] == token), None)

    def graft(self, chain: list[int]) -> list[int]:
        """Merge ``chain`` below the root, sharing the nodes whose tokens agree; returns the chain's nodes."""
        node, nodes = 0, []
        for token in chain:
            child = self.child_with(node, token)
            if child is None:
                self.tokens.append(token)
                self.parents.append(node)
                self.probs.append(None)
                child = len(self.tokens) - 1
            nodes.append(child)
            node = child
        return nodes

    def matched_length(self, chain: list[int]) -> int:
        """How many leading tokens of ``chain`` the tree holds as a path below the root."""
        node, length = 0, 0
        for token in chain:
            node = self.child_with(node, token)
            if node is None:
                break
            length += 1
        return length

    def token_tree(self, device: torch.device | str) -> TokenTree:
        return TokenTree(index_on(self.tokens, device), tuple(self.parents), list(self.probs))
