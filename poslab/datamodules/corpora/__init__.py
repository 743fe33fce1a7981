"""Real corpora (transitional: the module moved to corpora/cache.py; the next commit splits it)."""

import poslab.datamodules.corpora.cache as _cache

globals().update({name: value for name, value in vars(_cache).items() if not name.startswith("__")})
