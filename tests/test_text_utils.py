"""Reading text (text_utils.py): words, names, numbers, years, dates, table rows, sentences. Pure functions, no models."""

from __future__ import annotations

import re

from text_utils import (without_s, LETTER_RUN, WORD, WRITTEN_WORD, YEAR_SPAN, acronyms_written, one_year_spans, initials, is_period_cell,
                        is_table_row, keyword_tokens, months_in, numbers_in, sentence_spans, table_cells, tokenize,
                        without_possessive, year_of_line, years_in, years_named)


def test_tokenize_lowercases_strips_punctuation_and_stopwords():
    assert tokenize("The page. Page 3, Zürich!") == ["page", "page", "3", "zürich"]
    assert tokenize("What is the XK-4471B?") == ["xk", "4471b"]


def test_numbered_figures_and_tables_become_distinct_keywords():
    assert "figure_3" in tokenize("See Fig. 3 below") and "figure_3" in tokenize("Figure 3: results")
    assert "figure_3" not in tokenize("Table 3") and "table_3" in tokenize("Table 3")


def test_a_fiscal_year_is_a_keyword_of_its_four_digits():
    assert tokenize("FY2020") == ["fy", "2020"] and tokenize("FY20") == ["fy", "2020"]


def test_names_initials_and_words_in_capitals_are_acronym_keywords():
    assert keyword_tokens("the Prosecution Services Staff") == ["prosecution", "services", "staff", "^pss"]
    assert "^mid" not in keyword_tokens("in mid-2014") and "^mid" in keyword_tokens("MID trends")
    assert initials("Travelers Insurance Company") == ["ti", "tic"]
    assert acronyms_written("the SEC and Mid-2014 IT") == {"sec", "it"}


def test_numbers_are_read_without_their_thousands_separators():
    assert numbers_in("3,200 tonnes in 1911 (3.5%).") == {"3200", "1911", "3.5"}


def test_months_are_read_whole_or_abbreviated_and_not_inside_other_words():
    assert months_in("Due 01 June; it may slip to Sept. Marketing") == {"jun", "sep"}


def test_years_are_read_however_they_are_written():
    assert years_named("FY19 against fiscal year 2020 and 2021 (FY2021)") == ["2019", "2020", "2021"]


def test_a_year_inside_a_larger_number_is_no_year():
    assert years_in("fiscal 2022 (2,011 in FY2021; $2019 and 12019)") == {"2022", "2021"}


def test_a_year_span_of_one_year_is_read_as_a_period():
    assert one_year_spans("between 2002 to 2003; rows 2003-04 and 1999-00; 2001-2005") == {"2002-03", "2003-04", "1999-00"}


def test_a_line_or_cell_that_names_a_period():
    assert year_of_line("Fiscal 2022") == "2022" and year_of_line("2022 sales") is None
    assert is_period_cell("December 31, 2018") and is_period_cell("Q4 2022") and not is_period_cell("1,577")


def test_a_span_of_years_ends_in_two_digits_or_a_whole_year():
    assert YEAR_SPAN.findall("2003-04, 2001 to 2005, 2001-205") == [("2003", "04"), ("2001", "2005")]


def test_the_three_words_and_the_possessive():
    assert WORD.findall("GPT-4o's") == ["GPT", "4o", "s"]  # keyword search
    assert WRITTEN_WORD.findall("GPT-4o's Study--") == ["GPT-4o's", "Study"]  # a name as written
    assert LETTER_RUN.findall("FY2019 3M") == ["FY", "M"]  # capitals counted on letters
    assert [without_possessive(w) for w in ("Costco's", "Costco’s", "COSTCO'S", "Costco")] == ["Costco", "Costco", "COSTCO'S", "Costco"]


def test_a_markdown_table_row_and_its_cells():
    assert is_table_row("  | Net sales | 3,226.8 |  ") and not is_table_row("|") and not is_table_row("Net sales | 3,226.8")
    assert table_cells("| Net sales | 3,226.8 | |") == ["Net sales", "3,226.8", ""]


def test_sentences_and_lines_are_spans_of_the_text():
    text = 'One. Two!\nThree; four: He said "no." Then'
    assert [text[s:e] for s, e in sentence_spans(text)] == ["One.", "Two!", "Three;", "four:", 'He said "no.', "Then"]
    assert sentence_spans(" One  \nTwo") == [(0, 6), (7, 10)]  # untrimmed unless asked: offsets of the page's units


def test_what_ends_a_sentence_is_said_by_the_reader():
    def split(text: str, **reading) -> list[str]:
        return [text[s:e] for s, e in sentence_spans(text, **reading)]

    question = dict(marks=".!?", between=r"\s+", capital_after="?!", line_breaks=False, trim=True)
    assert split("What is X?Please answer; in USD.\nThanks", **question) == ["What is X?", "Please answer; in USD.", "Thanks"]
    prose = dict(marks=".!?", kept=r"[\"”)]*", between=r"(?=\s)", line_breaks=False, trim=True)
    assert split('He said "no." Then\nwent.', **prose) == ['He said "no."', "Then\nwent."]

    def not_after_fig(text: str, start: int, match: re.Match) -> bool:
        return not text[start : match.start()].endswith("Fig")

    answer = dict(marks=".!?", kept=r"(?:[^\S\n]*\[\d+\])*", between=r"(?=\s|$)", is_end=not_after_fig, trim=True)
    assert split("See Fig. 3. [1]\n[2] Done.", **answer) == ["See Fig. 3. [1]", "[2] Done."]
    assert sentence_spans("Skip. One. Two", 6, 14, trim=True) == [(6, 10), (11, 14)]  # a paragraph of a page


# -----------------------------------------------------------------------------
# Other languages: tokenize(text, language)


def test_english_tokens_are_the_same_with_or_without_a_language():
    sentence = "The Prosecution Services Staff installed R 4.2.2 with apt-get in FY19; see Fig. 3."
    expected = ["prosecution", "services", "staff", "installed", "r", "4", "2", "2", "apt", "get", "fy", "2019", "see",
                "fig", "3", "figure_3"]
    assert tokenize(sentence) == tokenize(sentence, "en") == tokenize(sentence, None) == expected
    assert keyword_tokens(sentence, "en") == keyword_tokens(sentence) == expected + ["^tpss", "^fy19"]


def test_a_german_question_word_and_a_differently_inflected_page_word_share_a_token():
    question, page = set(tokenize("Welche Pakete sind installiert?", "de")), set(tokenize("in den Paketen", "de"))
    assert question & page


def test_german_stopwords_are_dropped_but_searched_words_kept():
    assert tokenize("Die Zeit und das Jahr", "de") == tokenize("Zeit Jahr", "de") and len(tokenize("Zeit Jahr", "de")) == 2


def test_english_stopwords_are_dropped_from_other_languages_too():
    assert tokenize("the sources of the Debian-Pakete", "de") == tokenize("sources Debian-Pakete", "de")


def test_commands_and_versions_are_kept_as_written_in_other_languages():
    assert tokenize("apt-get x86_64 ext4 2.100", "de") == ["apt", "get", "x86_64", "ext4", "2", "100"]


def test_french_and_spanish_words_are_stemmed_to_one_form():
    assert tokenize("les paquets", "fr") == tokenize("un paquet", "fr") == ["paquet"]
    assert tokenize("instalar paquetes", "es") == tokenize("instalo un paquete", "es")


def test_a_japanese_question_and_a_page_sharing_a_word_share_tokens():
    question = set(tokenize("設定ファイルはどこですか？", "ja"))
    page = set(tokenize("Debian の設定ファイルは /etc にあります。", "ja"))
    assert {"設定", "ファ", "イル"} <= question & page


def test_a_run_of_japanese_becomes_overlapping_character_pairs_without_stopwords():
    assert tokenize("削除", "ja") == ["削除"] and tokenize("設定する", "ja") == ["設定", "定す"]  # "する" is a stopword


def test_a_lone_cjk_character_is_its_own_token():
    assert tokenize("表 3", "zh") == ["表", "3"]


def test_latin_words_inside_japanese_are_read_as_words():
    assert tokenize("Debianリファレンス", "ja") == ["debian", "リフ", "ファ", "ァレ", "レン", "ンス"]


def test_german_capitalised_nouns_make_no_initials_but_capitals_stay_acronyms():
    assert keyword_tokens("Neue Pakete mit APT", "de") == ["neu", "pak", "apt", "^apt"]


def test_a_plural_s_is_dropped_but_not_a_double_s_or_a_short_word():
    assert [without_s(w) for w in ("assets", "uses", "loss", "gas")] == ["asset", "use", "loss", "gas"]
