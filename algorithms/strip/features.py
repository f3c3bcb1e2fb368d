"""Noun-phrase pair features after Ng and Cardie (2002), from tokens, POS tags and dependencies.

Input: the ``tokens`` and ``mentions`` frames of :func:`scarce.tasks.readers.conllu.read_conllu`.
:func:`make_pairs` lists candidate pairs (antecedent ``mention_i`` before anaphor ``mention_j`` in
one document, within a window), :func:`pair_features` computes the features, :func:`source_mask`
chooses the labelled ("source") mentions and :func:`pair_labels` gives 1 / 0 for pairs of two
sources and -1 (unknown) for every other pair, as in the partially supervised setting of Stoyanov
and Cardie (2006), where only the coreference among opinion sources is annotated.

Features computed (Ng and Cardie 2002 names in capitals; ``_1`` is the antecedent, ``_2`` the
anaphor; C / I / NA = compatible / incompatible / not applicable):

* lexical: ``soon_str`` (SOON_STR, strings equal after dropping determiners), ``soon_str_nonpro``
  (SOON_STR_NONPRO), ``pro_str`` (PRO_STR), ``pn_str`` (PN_STR), ``words_str`` (WORDS_STR, equal
  raw strings, non-pronominal), ``head_match`` (HEAD_MATCH, equal head lemmas), ``word_overlap``
  (WORD_OVERLAP, a shared content word), ``words_substr`` (WORDS_SUBSTR, one word sequence inside
  the other, non-pronominal), ``pn_substr`` (PN_SUBSTR), ``modifier`` (MODIFIER, same head and the
  prenominal modifiers of one a subset of the other's), ``alias`` (ALIAS: acronym, or proper names
  sharing their last word);
* grammatical: ``pronoun_1``, ``pronoun_2`` (PRONOUN_1/2), ``np_type_1``, ``np_type_2`` (pronoun /
  proper / nominal / other, from the head's UPOS), ``definite_2`` (DEFINITE_2),
  ``demonstrative_2`` (DEMONSTRATIVE_2), ``indefinite_1`` (INDEFINITE), ``both_proper_nouns``
  (BOTH_PROPER_NOUNS), ``number`` (NUMBER: from ``Number=`` of the head and pronoun lists),
  ``gender`` (GENDER: pronouns, honorifics and a short list of gendered nouns), ``animacy``
  (ANIMACY: pronouns, gendered or person nouns vs. "it"/"which"), ``appositive`` (APPOSITIVE:
  ``appos`` dependency between the heads), ``prednom`` (PREDNOM: one head is the ``nsubj`` of the
  other, which has a ``cop`` child), ``subject_1``, ``subject_2`` (SUBJECT_1/2), ``embedded_1``,
  ``embedded_2`` (EMBEDDED_1/2: inside a larger mention), ``span`` (SPAN: one contains the other),
  ``quote_1``, ``quote_2`` (inside quotation marks);
* positional: ``sent_distance`` (SENTNUM), ``mention_distance``, ``paragraph_distance``;
  and ``same_speaker`` (Y / N / NA, for the spoken genres; not in Ng and Cardie).

Ng and Cardie features left out (they need resources we do not have: WordNet, a named-entity
tagger, a parser of a different kind, or a second system): WNCLASS and other semantic-class
features, CONSTRAINTS, PRO_RESOLVE / RULE_RESOLVE (outputs of other resolvers), CONTAINS_PN,
TITLE, MAXIMALNP, BOTH_EMBEDDED, BOTH_IN_QUOTES as a separate feature (covered by ``quote_1/2``),
PART_QUANT, PROPER_NOUN / PRONOUN details beyond the head's POS, CLOSEST_COMP, PARANUM (replaced by
``paragraph_distance``), and the NE-type based ALIAS variants (dates, organisation suffixes).

The corpus's entity type (``etype``), information status, ``link`` and ``identity`` are never
features: they are assigned per entity and give the answer away.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

__all__ = ["make_pairs", "pair_features", "source_mask", "pair_labels", "build_pairs",
           "document_sources", "pair_table", "PAIR_KEYS", "MENTION_KEYS", "SOURCE_KINDS"]

#: The columns of a pair table before its features (:func:`pair_table`).
PAIR_KEYS = ["doc", "mention_i", "mention_j", "label"]
#: The columns of the mention table of :func:`pair_table`.
MENTION_KEYS = ["doc", "mention", "entity", "source", "sent", "position_start", "position_end",
                "position_head"]
#: How the labelled ("source") mentions are chosen (:func:`document_sources`).
SOURCE_KINDS = ("etype", "fraction")

_DETERMINERS = {"the", "a", "an", "this", "that", "these", "those"}
_DEMONSTRATIVES = {"this", "that", "these", "those"}
_QUOTES = {'"', "``", "''", "“", "”", "‘", "’", "'"}
_STOP = {"the", "a", "an", "of", "and", "or", "in", "on", "to", "for", "with", "at", "by",
         "from", "this", "that", "these", "those", "'s", "’s", "its", "his", "her", "their",
         "our", "my", "your", "-", ",", ".", "(", ")", '"', "'"}
_MASC = {"he", "him", "his", "himself", "mr.", "mr", "man", "men", "boy", "boys", "father",
         "son", "brother", "husband", "king", "sir", "uncle", "gentleman", "grandfather",
         "nephew", "lord", "prince", "guy"}
_FEM = {"she", "her", "hers", "herself", "mrs.", "mrs", "ms.", "ms", "miss", "woman", "women",
        "girl", "girls", "mother", "daughter", "sister", "wife", "queen", "lady", "aunt",
        "grandmother", "niece", "princess", "madam"}
_NEUT = {"it", "its", "itself"}
_ANIMATE = _MASC | _FEM | {
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you", "your",
    "yours", "yourself", "yourselves", "who", "whom", "whose", "person", "people", "president",
    "minister", "official", "officials", "child", "children", "student", "students", "team",
    "member", "members", "author", "authors", "researcher", "researchers", "leader", "leaders",
    "player", "players", "friend", "friends", "teacher", "doctor", "family", "parents", "kid",
    "kids", "someone", "everyone", "anyone", "spokesman", "spokeswoman", "director", "chief"}
_INANIMATE = _NEUT | {"which", "what"}
_SING = {"i", "me", "my", "mine", "myself", "he", "him", "his", "himself", "she", "her",
         "hers", "herself", "it", "its", "itself", "this", "that", "yourself"}
_PLUR = {"we", "us", "our", "ours", "ourselves", "they", "them", "their", "theirs",
         "themselves", "these", "those", "yourselves"}


def make_pairs(mentions: pd.DataFrame, *, max_mention_distance: int | None = 20,
               max_sentence_distance: int | None = None) -> pd.DataFrame:
    """Candidate pairs ``(mention_i, mention_j)``, ``i`` before ``j`` in one document.

    Parameters
    ----------
    mentions : DataFrame
        The reader's mention frame (``doc``, ``mention``, ``sent``, ...).
    max_mention_distance : int or None, default 20
        Keep pairs at most this many mentions apart (None: no limit).
    max_sentence_distance : int or None, default None
        Keep pairs at most this many sentences apart (None: no limit).

    Returns
    -------
    DataFrame
        Columns ``doc``, ``mention_i``, ``mention_j`` (the ``mention`` ids), sorted by document.
    """
    for name, val in (("max_mention_distance", max_mention_distance),
                      ("max_sentence_distance", max_sentence_distance)):
        if val is not None and int(val) < (1 if name == "max_mention_distance" else 0):
            raise ValueError(f"{name} must be positive or None; got {val}")
    m = mentions.sort_values(["doc", "mention"], kind="stable").reset_index(drop=True)
    docs = m["doc"].to_numpy()
    sent = m["sent"].to_numpy()
    mid = m["mention"].to_numpy()
    n = len(m)
    if n == 0:
        return pd.DataFrame({"doc": [], "mention_i": np.zeros(0, int),
                             "mention_j": np.zeros(0, int)})
    _, dcode = np.unique(docs, return_inverse=True)
    sizes = np.bincount(dcode)
    max_d = int(sizes.max()) - 1
    if max_mention_distance is not None:
        max_d = min(max_d, int(max_mention_distance))
    ii, jj = [], []
    for d in range(1, max_d + 1):
        i = np.arange(n - d)
        j = i + d
        keep = dcode[i] == dcode[j]
        if max_sentence_distance is not None:
            keep &= (sent[j] - sent[i]) <= int(max_sentence_distance)
        ii.append(i[keep])
        jj.append(j[keep])
    i = np.concatenate(ii) if ii else np.zeros(0, int)
    j = np.concatenate(jj) if jj else np.zeros(0, int)
    order = np.lexsort((i, j, dcode[j])) if i.size else np.zeros(0, int)
    i, j = i[order], j[order]
    return pd.DataFrame({"doc": docs[i], "mention_i": mid[i], "mention_j": mid[j]})


def _rows(mentions, docs, ids):
    index = pd.MultiIndex.from_arrays([mentions["doc"].to_numpy(),
                                       mentions["mention"].to_numpy()])
    rows = index.get_indexer(pd.MultiIndex.from_arrays([np.asarray(docs), np.asarray(ids)]))
    if (rows < 0).any():
        k = int(np.flatnonzero(rows < 0)[0])
        raise ValueError(f"pair mention ({docs[k]}, {ids[k]}) is not in the mention frame")
    return rows


def _mention_table(tokens: pd.DataFrame, mentions: pd.DataFrame) -> pd.DataFrame:
    """Per-mention attributes used by the pair features."""
    need = {"doc", "position", "form", "lemma", "upos", "xpos", "feats", "head", "deprel",
            "sent", "token", "paragraph"}
    missing = need - set(tokens.columns)
    if missing:
        raise ValueError(f"tokens frame lacks columns {sorted(missing)}")
    tok = tokens.reset_index(drop=True)
    docs = tok["doc"].to_numpy()
    index = pd.MultiIndex.from_arrays([docs, tok["position"].to_numpy()])

    def glob(pos):
        r = index.get_indexer(pd.MultiIndex.from_arrays([mentions["doc"].to_numpy(), pos]))
        if (r < 0).any():
            raise ValueError("a mention points at a token position absent from tokens")
        return r

    gs = glob(mentions["position_start"].to_numpy())
    ge = glob(mentions["position_end"].to_numpy())
    gh = glob(mentions["position_head"].to_numpy())
    form = tok["form"].astype(str).to_numpy()
    lower = np.char.lower(form.astype(str)).astype(object)
    lemma = np.char.lower(tok["lemma"].astype(str).to_numpy().astype(str)).astype(object)
    upos = tok["upos"].astype(str).to_numpy()
    xpos = tok["xpos"].astype(str).to_numpy()
    feats = tok["feats"].astype(str).to_numpy()
    deprel = tok["deprel"].astype(str).to_numpy()
    # global index of each token's syntactic head (-1 for root / unknown)
    sent_start = tok["position"].to_numpy() - (tok["token"].to_numpy() - 1)
    head = tok["head"].to_numpy()
    head_pos = np.where(head > 0, sent_start + head - 1, -1)
    hp_idx = index.get_indexer(pd.MultiIndex.from_arrays([docs, head_pos]))
    hp_idx = np.where(head > 0, hp_idx, -1)
    has_cop = np.zeros(len(tok), dtype=bool)
    cop_heads = hp_idx[(deprel == "cop") & (hp_idx >= 0)]
    has_cop[cop_heads] = True
    quote_tok = np.isin(xpos, ["``", "''"]) | np.isin(form, list(_QUOTES))
    # quotes before each token within its sentence (parity says "inside quotes")
    sent_key = pd.factorize(pd.MultiIndex.from_arrays([docs, tok["sent"].to_numpy()]))[0]
    qcum = pd.Series(quote_tok.astype(np.int64)).groupby(sent_key).cumsum().to_numpy()
    q_before = qcum - quote_tok

    n = len(mentions)
    words, nodet, content, mods = [], [], [], []
    first = np.empty(n, dtype=object)
    caps = np.empty(n, dtype=object)
    for k in range(n):
        s, e, h = gs[k], ge[k], gh[k]
        w = lower[s:e + 1].tolist()
        u = upos[s:e + 1]
        words.append(" ".join(w))
        first[k] = w[0]
        kept = [t for t, p in zip(w, u, strict=True) if p != "PUNCT"]
        if kept and kept[0] in _DETERMINERS:
            kept = kept[1:]
        nodet.append(" ".join(kept))
        content.append(frozenset(t for t, p in zip(w, u, strict=True)
                                 if t not in _STOP and p not in ("PUNCT", "DET", "ADP")))
        mods.append(frozenset(t for t, p in zip(w[: h - s], u[: h - s], strict=True)
                              if p not in ("DET", "PUNCT")))
        caps[k] = "".join(f[0] for f, p in zip(form[s:e + 1], u, strict=True)
                          if p == "PROPN" and f[:1].isupper())
    hupos = upos[gh]
    hlow = lower[gh]
    np_type = np.where(hupos == "PRON", "PRO", np.where(
        hupos == "PROPN", "PN", np.where(np.isin(hupos, ["NOUN", "NUM"]), "NOM", "OTHER")))
    number = np.full(n, "NA", dtype=object)
    hfeats = feats[gh]
    number[np.char.find(hfeats.astype(str), "Number=Sing") >= 0] = "SING"
    number[np.char.find(hfeats.astype(str), "Number=Plur") >= 0] = "PLUR"
    number[np.isin(hlow, list(_SING))] = "SING"
    number[np.isin(hlow, list(_PLUR))] = "PLUR"
    gender = np.full(n, "NA", dtype=object)
    first_arr = first.astype(str)
    gender[np.isin(hlow, list(_NEUT))] = "NEUT"
    gender[np.isin(hlow, list(_MASC)) | np.isin(first_arr, ["mr.", "mr", "sir"])] = "MASC"
    gender[np.isin(hlow, list(_FEM)) | np.isin(first_arr, ["mrs.", "mrs", "ms.", "ms", "miss"])
           ] = "FEM"
    animacy = np.full(n, "NA", dtype=object)
    animacy[np.isin(hlow, list(_INANIMATE))] = "INANIM"
    animacy[np.isin(hlow, list(_ANIMATE)) | (gender == "MASC") | (gender == "FEM")] = "ANIM"
    # embedded: inside a strictly larger mention of the same document
    m = mentions
    mk = pd.DataFrame({"doc": m["doc"].to_numpy(), "s": m["position_start"].to_numpy(),
                       "e": m["position_end"].to_numpy(), "row": np.arange(n)})
    embedded = np.zeros(n, dtype=bool)
    for _, grp in mk.groupby("doc", sort=False):
        s = grp["s"].to_numpy()
        e = grp["e"].to_numpy()
        inside = (s[None, :] <= s[:, None]) & (e[None, :] >= e[:, None]) & (
            (e[None, :] - s[None, :]) > (e[:, None] - s[:, None]))
        embedded[grp["row"].to_numpy()] = inside.any(axis=1)
    return pd.DataFrame({
        "words": words, "nodet": nodet, "content": content, "mods": mods,
        "first": first_arr, "caps": caps, "head_lemma": lemma[gh], "head_glob": gh,
        "head_parent": hp_idx[gh], "head_deprel": deprel[gh], "mention": m["mention"].to_numpy(),
        "head_has_cop": has_cop[gh], "np_type": np_type, "number": number, "gender": gender,
        "animacy": animacy, "embedded": embedded, "quoted": (q_before[gs] % 2) == 1,
        "start": gs, "end": ge, "sent": m["sent"].to_numpy(),
        "paragraph": tok["paragraph"].to_numpy()[gs],
        "speaker": (tok["speaker"].to_numpy()[gs] if "speaker" in tok.columns
                    else np.full(n, None, dtype=object)),
        "last_word": [w.split(" ")[-1] for w in nodet],
    })


def _agree(a, b):
    known = (a != "NA") & (b != "NA")
    return np.where(known, np.where(a == b, "C", "I"), "NA")


def _is_sub(x: str, y: str) -> bool:
    return bool(x) and f" {x} " in f" {y} "


def pair_features(tokens: pd.DataFrame, mentions: pd.DataFrame,
                  pairs: pd.DataFrame) -> pd.DataFrame:
    """Ng and Cardie (2002) style features of each pair (see the module docstring for the list).

    Parameters
    ----------
    tokens, mentions : DataFrame
        The reader's frames.
    pairs : DataFrame
        ``doc``, ``mention_i``, ``mention_j`` (from :func:`make_pairs`).

    Returns
    -------
    DataFrame
        One row per pair, in order: bool columns (nominal True / False), string columns (C / I / NA
        agreement values, NP types) and int64 distances.  No entity type, no ``link``.
    """
    mt = _mention_table(tokens, mentions)
    ri = _rows(mentions, pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy())
    rj = _rows(mentions, pairs["doc"].to_numpy(), pairs["mention_j"].to_numpy())
    A = mt.iloc[ri].reset_index(drop=True)
    B = mt.iloc[rj].reset_index(drop=True)
    pro1 = (A["np_type"] == "PRO").to_numpy()
    pro2 = (B["np_type"] == "PRO").to_numpy()
    pn1 = (A["np_type"] == "PN").to_numpy()
    pn2 = (B["np_type"] == "PN").to_numpy()
    nodet_eq = (A["nodet"].to_numpy() == B["nodet"].to_numpy())
    words_eq = (A["words"].to_numpy() == B["words"].to_numpy())
    head_eq = (A["head_lemma"].to_numpy() == B["head_lemma"].to_numpy())
    an, bn = A["nodet"].tolist(), B["nodet"].tolist()
    substr = np.fromiter((_is_sub(x, y) or _is_sub(y, x) for x, y in zip(an, bn, strict=True)),
                         dtype=bool, count=len(an))
    overlap = np.fromiter((bool(x & y) for x, y in zip(A["content"], B["content"], strict=True)),
                          dtype=bool, count=len(an))
    modifier = head_eq & np.fromiter(
        (x <= y or y <= x for x, y in zip(A["mods"], B["mods"], strict=True)), dtype=bool,
        count=len(an))
    caps_a, caps_b = A["caps"].to_numpy(), B["caps"].to_numpy()
    wa, wb = A["words"].to_numpy(), B["words"].to_numpy()
    acro = np.fromiter(
        ((len(ca) > 1 and wb_.replace(".", "") == ca.lower() and " " not in wb_) or
         (len(cb) > 1 and wa_.replace(".", "") == cb.lower() and " " not in wa_)
         for ca, cb, wa_, wb_ in zip(caps_a, caps_b, wa, wb, strict=True)),
        dtype=bool, count=len(an))
    last_eq = pn1 & pn2 & (A["last_word"].to_numpy() == B["last_word"].to_numpy())
    ha, hb = A["head_glob"].to_numpy(), B["head_glob"].to_numpy()
    pa, pb = A["head_parent"].to_numpy(), B["head_parent"].to_numpy()
    da, db = A["head_deprel"].to_numpy().astype(str), B["head_deprel"].to_numpy().astype(str)
    appos = ((db == "appos") & (pb == ha)) | ((da == "appos") & (pa == hb))
    subj_a = np.char.startswith(da, "nsubj")
    subj_b = np.char.startswith(db, "nsubj")
    prednom = ((subj_a & (pa == hb) & B["head_has_cop"].to_numpy()) |
               (subj_b & (pb == ha) & A["head_has_cop"].to_numpy()))
    sa, ea = A["start"].to_numpy(), A["end"].to_numpy()
    sb, eb = B["start"].to_numpy(), B["end"].to_numpy()
    span = ((sa <= sb) & (ea >= eb)) | ((sb <= sa) & (eb >= ea))
    spk_a, spk_b = A["speaker"].to_numpy(), B["speaker"].to_numpy()
    known = pd.notna(spk_a) & pd.notna(spk_b)
    same_spk = np.where(known, np.where(spk_a == spk_b, "Y", "N"), "NA")
    first_b = B["first"].to_numpy().astype(str)
    out = pd.DataFrame({
        "soon_str": nodet_eq,
        "soon_str_nonpro": nodet_eq & ~pro1 & ~pro2,
        "pro_str": words_eq & pro1 & pro2,
        "pn_str": words_eq & pn1 & pn2,
        "words_str": words_eq & ~pro1 & ~pro2,
        "head_match": head_eq,
        "word_overlap": overlap,
        "words_substr": substr & ~pro1 & ~pro2,
        "pn_substr": substr & pn1 & pn2,
        "modifier": modifier,
        "alias": acro | last_eq,
        "pronoun_1": pro1,
        "pronoun_2": pro2,
        "np_type_1": A["np_type"].to_numpy().astype(str),
        "np_type_2": B["np_type"].to_numpy().astype(str),
        "definite_2": first_b == "the",
        "demonstrative_2": np.isin(first_b, list(_DEMONSTRATIVES)),
        "indefinite_1": np.isin(A["first"].to_numpy().astype(str), ["a", "an"]),
        "both_proper_nouns": pn1 & pn2,
        "number": _agree(A["number"].to_numpy(), B["number"].to_numpy()),
        "gender": _agree(A["gender"].to_numpy(), B["gender"].to_numpy()),
        "animacy": _agree(A["animacy"].to_numpy(), B["animacy"].to_numpy()),
        "appositive": appos,
        "prednom": prednom,
        "subject_1": subj_a,
        "subject_2": subj_b,
        "embedded_1": A["embedded"].to_numpy(),
        "embedded_2": B["embedded"].to_numpy(),
        "span": span,
        "quote_1": A["quoted"].to_numpy(),
        "quote_2": B["quoted"].to_numpy(),
        "same_speaker": same_spk.astype(str),
        "sent_distance": (B["sent"].to_numpy() - A["sent"].to_numpy()).astype(np.int64),
        "mention_distance": (B["mention"].to_numpy()
                             - A["mention"].to_numpy()).astype(np.int64),
        "paragraph_distance": (B["paragraph"].to_numpy()
                               - A["paragraph"].to_numpy()).astype(np.int64),
    })
    return out


def source_mask(mentions: pd.DataFrame, *, etypes=("person", "organization"),
                fraction: float | None = None, random_state=None) -> np.ndarray:
    """Which mentions are labelled ("sources").

    Parameters
    ----------
    mentions : DataFrame
        The reader's mention frame.
    etypes : sequence of str, default ("person", "organization")
        Mentions of entities of these types are sources (the opinion holders of the paper's
        setting).  Used when ``fraction`` is None.
    fraction : float in (0, 1] or None
        If given, a seeded random fraction of the entities of each document are sources instead.
    random_state : int, RandomState or None

    Returns
    -------
    ndarray of bool, one per mention row.
    """
    if fraction is None:
        return mentions["etype"].isin(list(etypes)).to_numpy()
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    # imported here: only the training's sampling draws; the features of a StRip model
    # applied to new documents need no scikit-learn
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    key = pd.MultiIndex.from_arrays([mentions["doc"].to_numpy(), mentions["entity"].to_numpy()])
    codes, uniq = pd.factorize(key)
    chosen = rng.random_sample(len(uniq)) < fraction
    return chosen[codes]


def pair_labels(mentions: pd.DataFrame, pairs: pd.DataFrame, sources=None) -> np.ndarray:
    """1 (same entity) / 0 (different) for pairs of two sources, -1 (unknown) otherwise.

    ``sources=None`` labels every pair.
    """
    ri = _rows(mentions, pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy())
    rj = _rows(mentions, pairs["doc"].to_numpy(), pairs["mention_j"].to_numpy())
    ent = mentions["entity"].astype(str).to_numpy()
    y = (ent[ri] == ent[rj]).astype(np.int64)
    if sources is not None:
        src = np.asarray(sources, dtype=bool)
        if src.shape != (len(mentions),):
            raise ValueError(f"sources must have one entry per mention ({len(mentions)}); got "
                             f"{src.shape}")
        y[~(src[ri] & src[rj])] = -1
    return y


def build_pairs(tokens, mentions, *, max_mention_distance=20, max_sentence_distance=None,
                sources=None):
    """:func:`make_pairs`, :func:`pair_features` and :func:`pair_labels` in one call.

    Returns
    -------
    pairs : DataFrame
        ``doc``, ``mention_i``, ``mention_j``.
    X : DataFrame
        Pair features.
    y : ndarray of int64
        Labels (1 / 0 / -1).
    """
    pairs = make_pairs(mentions, max_mention_distance=max_mention_distance,
                       max_sentence_distance=max_sentence_distance)
    return pairs, pair_features(tokens, mentions, pairs), pair_labels(mentions, pairs, sources)


def _source_seed(seed: int, doc: str) -> np.random.RandomState:
    """A generator for one document's source draw: independent of the other documents."""
    ss = np.random.SeedSequence([int(seed), zlib.crc32(str(doc).encode())])
    return np.random.RandomState(ss.generate_state(1)[0])


def document_sources(mentions: pd.DataFrame, *, source_kind: str, etypes, fraction: float | None,
                     seed: int | None) -> np.ndarray:
    """Which mentions are sources, document by document.

    ``source_kind="etype"``: the mentions of entities whose type is in ``etypes``
    (:func:`source_mask`); ``"fraction"``: a ``fraction`` of the entities of each document,
    drawn with a generator seeded by ``seed`` and the document id, so that a document gets the
    same sources whatever file or collection it is read with.

    Returns
    -------
    ndarray of bool, one per mention row.
    """
    if source_kind == "etype":
        return source_mask(mentions, etypes=tuple(etypes))
    if source_kind != "fraction":
        raise ValueError(f"unknown source kind {source_kind!r}; expected one of {SOURCE_KINDS}")
    if seed is None:
        raise ValueError("source_kind 'fraction' needs an integer seed")
    sources = np.zeros(len(mentions), dtype=bool)
    for doc, rows in mentions.groupby("doc", sort=False).indices.items():
        sources[rows] = source_mask(mentions.iloc[rows], fraction=fraction,
                                    random_state=_source_seed(seed, doc))
    return sources


def pair_table(tokens: pd.DataFrame, mentions: pd.DataFrame, *, window: int,
               max_sentence_distance: int | None, source_kind: str, etypes,
               fraction: float | None, seed: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The mentions and the pair table StRip learns from, for the documents of one reading.

    Parameters
    ----------
    tokens, mentions : DataFrame
        The reader's frames (:func:`scarce.tasks.readers.conllu.read_conllu`).
    window : int
        Pairs of mentions at most this many mentions apart (:func:`make_pairs`).
    max_sentence_distance : int or None
        And at most this many sentences apart (None: no limit).
    source_kind, etypes, fraction, seed
        The labelled mentions (:func:`document_sources`).

    Returns
    -------
    mentions : DataFrame
        :data:`MENTION_KEYS`: ``doc, mention, entity`` (as str), ``source`` (bool) and the
        sentence and token positions.
    pairs : DataFrame
        :data:`PAIR_KEYS` (``label``: 1 / 0 for two sources, -1 unknown, :func:`pair_labels`)
        then the features of :func:`pair_features`.
    """
    sources = document_sources(mentions, source_kind=source_kind, etypes=etypes,
                               fraction=fraction, seed=seed)
    pairs, X, y = build_pairs(tokens, mentions, max_mention_distance=window,
                              max_sentence_distance=max_sentence_distance, sources=sources)
    pairs = pairs.reset_index(drop=True)
    pairs["label"] = y
    table = pd.concat([pairs, X.reset_index(drop=True)], axis=1)
    men = mentions.assign(source=sources)[MENTION_KEYS].reset_index(drop=True)
    men["entity"] = men["entity"].astype(str)
    return men, table
