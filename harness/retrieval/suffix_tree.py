"""Suffix trees over token sequences and the frequency-scored speculation of Suffix Decoding.

SuffixDecoding (Oliaro et al., NeurIPS 2025, arXiv 2411.04975; vLLM's and SGLang's ``suffix`` method) keeps every
suffix of the sequences it has seen, up to ``max_depth`` tokens, in one trie whose nodes count the suffix
occurrences that pass through them. To draft it matches the newest tokens of the context (every match length from
1 up), and from each matched node grows a speculation tree best-first by the estimated probability of each path
(the product of child count over parent count along it), keeping nodes whose probability is at least
``min_token_prob`` and at most ``match_len * max_spec_factor + max_spec_offset`` of them: a long match earns a long
speculation. Of the match lengths, the draft with the highest score (the sum of its nodes' probabilities, its
expected accepted tokens) wins.

This trie is uncompressed (one node per token, depth capped): appending a token walks the at most ``max_depth``
suffixes still growing, O(max_depth) dictionary operations. Sequences can be removed again (the global cache's
FIFO eviction). The structure is ours, written from the paper's description.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field


class Node:
    """One trie node: the suffix occurrences through it (``count``) and its children by token."""

    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, Node] = {}
        self.count = 0


@dataclass(frozen=True)
class SpeculationLimits:
    """How far a match may speculate: at most ``min(max_tokens, match_len * factor + offset)`` nodes, each of
    estimated probability at least ``min_token_prob``; ``tree``: a best-first tree, else one most-frequent path."""

    max_tokens: int = 24
    factor: float = 1.0
    offset: float = 0.0
    min_token_prob: float = 0.1
    tree: bool = True

    def budget(self, match_len: int) -> int:
        return max(0, min(self.max_tokens, int(match_len * self.factor + self.offset + 1e-6)))


@dataclass
class Draft:
    """A speculation: ``tokens`` with ``parents`` (-1: a child of the context's last token; else an index into
    ``tokens``, always earlier), each token's estimated probability, their sum (``score``) and the match length
    it came from."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    match_len: int = 0

    @property
    def score(self) -> float:
        return sum(self.probs)


class SuffixTree:
    """Every suffix (at most ``max_depth`` tokens) of a set of sequences, with occurrence counts."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 2:
            raise ValueError(f"a suffix tree needs max_depth >= 2, got {max_depth}")
        self.max_depth = max_depth
        self.root = Node()
        self.sequences: dict[int, list[int]] = {}
        self.growing: dict[int, deque[Node]] = {}  # per sequence: the nodes its newest (still growing) suffixes end at

    def append(self, sequence: int, token: int) -> None:
        """Append ``token`` to sequence ``sequence`` (a new one if unseen): every suffix ending at the new token
        gains one occurrence."""
        tokens = self.sequences.setdefault(sequence, [])
        growing = self.growing.setdefault(sequence, deque())
        tokens.append(token)
        self.root.count += 1
        growing.append(self.root)  # the new one-token suffix starts at the root
        if len(growing) > self.max_depth:
            growing.popleft()  # a suffix at full depth stops growing
        for index, node in enumerate(growing):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = Node()
            child.count += 1
            growing[index] = child

    def extend(self, sequence: int, tokens: list[int]) -> None:
        for token in tokens:
            self.append(sequence, token)

    def remove(self, sequence: int) -> None:
        """Drop every suffix occurrence of ``sequence`` (nodes left with no occurrence go too)."""
        tokens = self.sequences.pop(sequence, [])
        self.growing.pop(sequence, None)
        for start in range(len(tokens)):
            node = self.root
            node.count -= 1
            for token in tokens[start:start + self.max_depth]:
                child = node.children[token]
                child.count -= 1
                if child.count == 0:
                    del node.children[token]
                    break
                node = child

    def match(self, pattern: list[int]) -> Node | None:
        """The node of ``pattern`` (a path from the root), or None if it never occurred."""
        node = self.root
        for token in pattern:
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def speculate(self, context: list[int], limits: SpeculationLimits) -> Draft:
        """The best-scoring draft over the match lengths 1, 2, ... of ``context``'s newest tokens (longer matches
        win ties), stopping at the first length that never occurred."""
        best = Draft()
        for match_len in range(1, min(len(context), self.max_depth - 1) + 1):
            node = self.match(context[-match_len:])
            if node is None:
                break
            draft = grow_draft(node, limits.budget(match_len), limits.min_token_prob, limits.tree)
            if draft.score >= best.score:
                best, best.match_len = draft, match_len
        return best


def grow_draft(node: Node, budget: int, min_token_prob: float, tree: bool) -> Draft:
    """From a matched node: the ``budget`` most probable continuations best-first (``tree``), or the path of the
    most frequent child at each step; a node's probability is its parent's times child count over parent count."""
    draft = Draft()
    if not tree:
        prob, index = 1.0, -1
        while len(draft.tokens) < budget and node.children:
            token, child = max(node.children.items(), key=lambda item: item[1].count)
            prob *= child.count / node.count
            if prob < min_token_prob:
                break
            draft.tokens.append(token)
            draft.parents.append(index)
            draft.probs.append(prob)
            index, node = len(draft.tokens) - 1, child
        return draft
    frontier: list[tuple[float, int, int, int, Node]] = []  # (-prob, order of push, token, parent index, node)
    order = 0

    def push(parent: Node, parent_index: int, prob: float) -> None:
        nonlocal order
        for token, child in parent.children.items():
            child_prob = prob * child.count / parent.count
            if child_prob >= min_token_prob:
                heapq.heappush(frontier, (-child_prob, order, token, parent_index, child))
                order += 1

    push(node, -1, 1.0)
    while frontier and len(draft.tokens) < budget:
        negative, _, token, parent_index, child = heapq.heappop(frontier)
        draft.tokens.append(token)
        draft.parents.append(parent_index)
        draft.probs.append(-negative)
        push(child, len(draft.tokens) - 1, -negative)
    return draft


class SuffixCache:
    """Suffix Decoding's two trees: a per-request tree over the request's prompt and output, and a global tree over
    the outputs of the run's requests (this one's included as it grows), the oldest evicted beyond
    ``max_cached_requests`` (-1: none; 0: no global tree). A draft comes from whichever tree scores higher."""

    def __init__(self, max_depth: int, max_cached_requests: int) -> None:
        self.max_depth, self.max_cached_requests = max_depth, max_cached_requests
        self.global_tree = SuffixTree(max_depth)
        self.local_tree = SuffixTree(max_depth)
        self.cached: deque[int] = deque()  # the global tree's requests, oldest first
        self.active: int | None = None  # this request's sequence in the global tree (None: not cached)
        self.requests = 0

    def start_request(self, prompt: list[int], output: list[int], cached: bool) -> None:
        """A new request: its prompt and first ``output`` tokens; ``cached``: its output joins the global tree."""
        self.local_tree = SuffixTree(self.max_depth)
        self.local_tree.extend(0, prompt)
        self.active = None
        if cached and self.max_cached_requests != 0:
            self.active, self.requests = self.requests, self.requests + 1
            self.cached.append(self.active)
            while 0 < self.max_cached_requests < len(self.cached):
                self.global_tree.remove(self.cached.popleft())
        self.add_output(output)

    def add_output(self, tokens: list[int]) -> None:
        """Tokens the request emitted: into its own tree and, if it is cached, the global one (eviction takes the
        oldest request first, never the newest, so an active request stays cached)."""
        self.local_tree.extend(0, tokens)
        if self.active is not None:
            self.global_tree.extend(self.active, tokens)

    def speculate(self, context: list[int], limits: SpeculationLimits) -> tuple[Draft, str]:
        """The higher-scoring of the two trees' drafts for ``context`` (ties: the request's own), and which."""
        pattern = context[-self.max_depth:]
        local = self.local_tree.speculate(pattern, limits)
        shared = self.global_tree.speculate(pattern, limits) if self.cached else Draft()
        return (shared, "global") if shared.score > local.score else (local, "request")
