"""The fusion of the lexical and semantic rankings (`memory.search.recall.fuse`): word coverage, replies."""

import pytest

from memory.search import FOLLOW_SHARES
from memory.search.rank import MARK_END, MARK_START, Scored
from memory.search.recall import RRF_K, W_LEXICAL, fuse, lexical_ranks


def match(pk, *words, reply_to=None, share=1.0):
    marked = " ".join(f"{MARK_START}{w}{MARK_END}" for w in words)
    return Scored(pk, 1.0, f"said {marked} here", reply_to=reply_to, share=share)


def test_the_first_match_of_a_word_no_match_above_had_ranks_after_one_match_per_word_covered():
    # "who is Rui's wife?": greetings to Rui first (the name weighs more), the answer with "wife" 7th.
    lexical = [match(1, "Rui"), match(2, "Rui"), match(3, "Rui"), match(4, "Rui"), match(5, "Rui"),
               match(6, "Rui"), match(7, "wife")]
    assert lexical_ranks(lexical) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 2}


def test_words_are_compared_by_stem_and_a_match_of_covered_words_keeps_its_place():
    lexical = [match(1, "bowling"), match(2, "Bowled"), match(3, "bowling", "team"), match(4, "teams")]
    assert lexical_ranks(lexical) == {1: 1, 2: 2, 3: 2, 4: 4}


def test_replies_keep_their_places_and_cover_no_word():
    lexical = [match(1, "bowling"), match(2, reply_to=1), match(3, reply_to=1), match(4, "bowling"),
               match(5, "team")]
    assert lexical_ranks(lexical) == {1: 1, 4: 4, 5: 2}


def test_hybrid_fusion_keeps_the_other_words_match_within_the_first_ten():
    lexical = [match(i, "Rui") for i in range(1, 7)] + [match(7, "wife")]
    semantic = [Scored(100 + i, 0.5, "") for i in range(10)]
    covered = [hit.id for hit, _ in fuse(lexical, semantic, 10)]
    assert 7 in covered
    plain = fuse(lexical, semantic, 10, covering=False)
    assert 7 not in [hit.id for hit, _ in plain]
    assert dict((hit.id, score) for hit, score in fuse(lexical, [], 10))[7] == W_LEXICAL / (RRF_K + 2)


@pytest.mark.parametrize("covering", [True, False], ids=["hybrid", "lexical"])
def test_the_next_message_after_a_match_stays_above_the_one_after_it(covering):
    # "What are you planning to do with them?" (1), the answer (20), the assistant's comment on it (21):
    # both replies come far down their list, and each stands at its own share of the question's score.
    next_one, after_it = FOLLOW_SHARES
    lexical = [match(1, "planning"), *(match(i, "Rui") for i in range(2, 10)),
               match(20, reply_to=1, share=next_one), match(21, reply_to=1, share=after_it)]
    semantic = [Scored(100 + i, 0.5, "") for i in range(10)] if covering else []
    fused = dict((hit.id, score) for hit, score in fuse(lexical, semantic, 30, covering=covering))
    assert fused[20] > fused[21]
    assert fused[20] == pytest.approx(next_one * fused[1])
    assert fused[21] == pytest.approx(after_it * fused[1])


def test_a_reply_one_list_cut_still_follows_its_hit_where_the_other_list_brought_it():
    # "what is Rui planning to do with the grandchildren?": the message about the grandchildren (1) is the
    # meaning's 3rd neighbour and well up the fused ranking; the answer (20), two messages after it, fell
    # below the meaning list's last place, and the words brought it only as the reply to the assistant's
    # question (9, far down).
    next_one, after_it = FOLLOW_SHARES
    lexical = [*(match(i, "Rui") for i in range(2, 8)), match(1, "grandchildren"), match(9, "planning"),
               match(20, reply_to=9, share=next_one)]
    semantic = [Scored(100, 0.5, ""), Scored(101, 0.5, ""), Scored(1, 0.5, ""),
                *(Scored(102 + i, 0.5, "") for i in range(7))]
    cut = [Scored(9, 0.3, "", reply_to=1, share=next_one), Scored(20, 0.2, "", reply_to=1, share=after_it)]
    without = dict((hit.id, score) for hit, score in fuse(lexical, semantic, 30))
    fused = {hit.id: (hit, score) for hit, score in fuse(lexical, semantic, 30, cut=cut)}
    assert without[20] < after_it * without[1]
    reply, score = fused[20]
    assert score == pytest.approx(after_it * fused[1][1])
    assert (reply.reply_to, reply.share) == (1, after_it)  # explained by the hit its place comes from
    # The assistant's question matched a word of its own: it keeps its place as a match.
    assert fused[9][0].reply_to is None and fused[9][1] == without[9]
    # A reply whose hit is in neither list, or that neither list brought, changes nothing.
    stray = [Scored(20, 0.2, "", reply_to=555, share=after_it), Scored(556, 0.2, "", reply_to=1, share=next_one)]
    assert dict((hit.id, score) for hit, score in fuse(lexical, semantic, 30, cut=stray)) == without
