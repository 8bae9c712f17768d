"""Model-free drafting structures: n-gram matching over the context, a corpus datastore, a store of the target's
next-token distributions. Host-side and torch-light; the methods `pld`, `stand` and `reader` draft from them."""
