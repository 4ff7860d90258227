"""Telling languages apart (language.py): documents, questions, and what the app can do for each. No models."""

from __future__ import annotations

import language
from language import MEANING_LANGUAGES, detect_language, language_name, question_language, support, support_message

GERMAN = """Die Paketverwaltung von Debian installiert, aktualisiert und entfernt Programme. Sie löst dabei
die Abhängigkeiten zwischen den Paketen selbst auf. Wer ein neues Programm braucht, sucht es zuerst in den
Paketquellen und installiert es dann mit einem einzigen Befehl. Die Konfiguration bleibt beim Entfernen erhalten."""

FRENCH = """Le système de gestion des paquets de Debian installe, met à jour et supprime les logiciels. Il résout
lui-même les dépendances entre les paquets. Lorsque vous avez besoin d'un nouveau programme, cherchez-le d'abord
dans les sources de paquets, puis installez-le avec une seule commande. La configuration est conservée."""

SPANISH = """LaTeX es un sistema de composición de textos orientado a la creación de documentos escritos que
presenten una alta calidad tipográfica. Por sus características y posibilidades, es usado de forma especialmente
intensa en la generación de artículos y libros científicos que incluyen, entre otros elementos, expresiones
matemáticas."""

JAPANESE = """Debian はフリーのオペレーティングシステムです。パッケージ管理システムを使うと、ソフトウェアのインストール、
更新、削除を簡単に行うことができます。依存関係は自動的に解決されます。新しいプログラムが必要なときは、まずパッケージ
の一覧から探し、それから一つのコマンドでインストールします。設定ファイルは削除しても残ります。システム管理の多くの
局面を、シェルコマンドの例を通して説明します。このリファレンスは、インストール後のシステムについて、ユーザー向けの
案内書として広範な概論を提供することを目的としています。"""

# English prose around R code and shell commands: the code lines must not tip it to another language
ENGLISH_WITH_CODE = """To set up a vector named x, say, consisting of five numbers, namely 10.4, 5.6, 3.1, 6.4
and 21.7, use the R command
> x <- c(10.4, 5.6, 3.1, 6.4, 21.7)
This is an assignment statement using the function c() which in this context can take an arbitrary number of
vector arguments and whose value is a vector got by concatenating its arguments end to end.
$ sudo apt-get install r-base-dev
$ R CMD INSTALL --library=/usr/local/lib/R mypkg_1.0.tar.gz
Notice that the assignment operator consists of the two characters less than and minus occurring strictly
side by side."""


def test_a_german_paragraph_is_german():
    assert detect_language(GERMAN) == "de"


def test_a_french_paragraph_is_french():
    assert detect_language(FRENCH) == "fr"


def test_a_spanish_paragraph_is_spanish():
    assert detect_language(SPANISH) == "es"


def test_a_japanese_paragraph_with_latin_names_is_japanese():
    assert detect_language(JAPANESE) == "ja"


def test_english_prose_with_r_and_shell_commands_is_english():
    assert detect_language(ENGLISH_WITH_CODE) == "en"


def test_too_little_text_has_no_language():
    assert detect_language("Debian-Referenz\nii\nCopyright © 2013-2021") is None
    assert detect_language("") is None


def test_lines_of_figures_and_dot_leaders_are_not_counted_as_text():
    contents = "\n".join(f"1.{i} Einleitung . . . . . . . . . . . . . . . . . . {i * 3}" for i in range(40))
    assert detect_language(contents) is None  # 40 lines, but each mostly dots and digits


def test_short_questions_are_told_in_each_language():
    assert question_language("How do I install a package?") == "en"
    assert question_language("Wie installiere ich ein Paket?") == "de"
    assert question_language("Comment installer un paquet ?") == "fr"
    assert question_language("¿Cómo instalo un paquete?") == "es"
    assert question_language("Come si installa un pacchetto?") == "it"
    assert question_language("Hoe installeer ik een pakket?") == "nl"
    assert question_language("Как установить пакет?") == "ru"


def test_questions_in_scripts_without_spaces_are_told_however_short():
    assert question_language("設定ファイルはどこですか") == "ja"
    assert question_language("如何安装软件包？") == "zh"
    assert question_language("패키지를 설치하는 방법은?") == "ko"


def test_a_question_of_fewer_than_three_words_takes_the_default():
    assert question_language("Tabelle erstellen") == "en"
    assert question_language("plot sin(x)", default="de") == "de"


def test_an_unsure_question_takes_the_default():
    assert question_language("Define variance now") == "en"  # three words, no language stands out


def test_question_language_chooses_only_among_the_languages_served():
    assert question_language("Hur installerar jag ett paket?") in MEANING_LANGUAGES  # Swedish is not one


def test_document_detection_is_not_restricted_by_questions():
    question_language("Wie installiere ich ein Paket?")
    swedish = ("Pakethanteringssystemet i Debian installerar, uppdaterar och tar bort program. Det löser själv "
               "beroendena mellan paketen. När du behöver ett nytt program letar du först i paketkällorna och "
               "installerar det sedan med ett enda kommando. Inställningarna finns kvar när paketet tas bort.")
    assert detect_language(swedish) == "sv"


def test_language_names_are_english_names_or_the_code():
    assert language_name("de") == "German" and language_name("ja") == "Japanese" and language_name("sv") == "Swedish"
    assert language_name("xyz") == "xyz"


def test_the_embedder_languages_are_the_fifteen_codes_of_use_multilingual():
    assert MEANING_LANGUAGES == set("ar de en es fr it ja ko nl pl pt ru th tr zh".split())


def test_every_embedder_language_is_fully_supported():
    assert {code: support(code) for code in MEANING_LANGUAGES} == dict.fromkeys(MEANING_LANGUAGES, "full")


def test_a_language_the_embedder_does_not_know_is_searched_by_keywords():
    assert support("sv") == "keywords" and support("fi") == "keywords"


def test_a_fully_supported_language_has_no_upload_message():
    assert support_message("de") is None and support_message("en") is None and support_message(None) is None
    assert support_message("") is None  # ingest records an unknown language as ""


def test_a_keywords_only_language_gets_one_plain_sentence():
    assert support_message("sv") == ("Swedish: searched by its words only — the meaning search does not know Swedish, "
                                     "so questions worded differently from the page may miss it.")


def test_stopword_lists_keep_the_content_words_people_search_for():
    assert {"der", "und", "nicht"} <= language.stopwords("de") and not {"zeit", "jahr", "beispiel", "r"} & language.stopwords("de")
    assert "les" in language.stopwords("fr") and not {"valeur", "état", "sujet"} & language.stopwords("fr")
    assert "los" in language.stopwords("es") and not {"trabajo", "valor", "ejemplo", "3"} & language.stopwords("es")


def test_stopword_lists_from_stopwords_iso_lose_their_digits():
    assert "가" in language.stopwords("ko") and not {"0", "3", "?"} & language.stopwords("ko")


def test_a_language_without_a_stemmer_has_none():
    assert language.stemmer("ja") is None and language.stemmer("de").stem("paketen") == language.stemmer("de").stem("pakete")
