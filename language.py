"""Which language a text is in, and how well the app can search it.

A document's language is told once, when it is read; a question's each time it is asked.
Both go through py3langid, a naive Bayes classifier over byte n-grams that knows 140
languages. The language then picks how keyword search splits words (stopwords, stemmer:
text_utils.tokenize) and what the upload screen says about the document.

    document text -> _sample()            lines that are mostly letters, up to ~20,000 characters
                  -> detect_language()    "de", or None when there are too few letters to tell
    question      -> question_language()  one of QUESTION_LANGUAGES, or the default when unsure
    code          -> language_name()      "de" -> "German"
                  -> support()            "full" or "keywords": can meaning search and word search both serve it?
                  -> support_message()    None, or one sentence for the upload screen
                  -> stopwords() / stemmer()   what text_utils.tokenize drops and how it folds word forms

Two identifiers share one model, loaded once on first use (~0.6 s): the whole one tells a
document's language among all 140; the other is restricted to the languages the app
answers well, because a five-word question carries too few n-grams to choose among 140
("Define variance" alone reads as Danish).

Nothing here imports numpy or py3langid until a language is detected, so text_utils may
import this module for its stopwords and stemmers and stay light.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import config

# -----------------------------------------------------------------------------
# -----------------------------------------------------------------------------
# Languages

# The languages of the multilingual embedder (Universal Sentence Encoder multilingual: "16
# languages", counting simplified and traditional Chinese apart, so 15 codes). A question or
# page in one of them is found by meaning as well as by its words.
MEANING_LANGUAGES = frozenset("ar de en es fr it ja ko nl pl pt ru th tr zh".split())
QUESTION_LANGUAGES = MEANING_LANGUAGES  # what question_language() chooses among

# Languages whose script keyword search cuts into overlapping character pairs instead of
# words (text_utils.tokenize): written without spaces (Chinese, Japanese, Thai...), or, for
# Korean, in spaced words that carry their particles.
UNSPACED_LANGUAGES = frozenset("ja zh ko th lo km my wuu yue".split())

_NAMES = {
    "af": "Afrikaans", "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto",
    "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese", "ka": "Georgian",
    "ko": "Korean", "la": "Latin", "lb": "Luxembourgish", "lt": "Lithuanian", "lv": "Latvian", "mk": "Macedonian",
    "ms": "Malay", "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian",
    "sv": "Swedish", "sw": "Swahili", "ta": "Tamil", "th": "Thai", "tl": "Tagalog", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "wuu": "Wu Chinese", "yue": "Cantonese", "zh": "Chinese",
}


def language_name(code: str | None) -> str:
    """The language's English name: language_name("de") -> "German"; an unlisted code is its own name."""
    return _NAMES.get(code or "", code or "unknown language")


# -----------------------------------------------------------------------------
# Telling the language: one model, two identifiers

_LOCK = threading.Lock()
_IDENTIFIERS: tuple | None = None  # (whole, restricted to QUESTION_LANGUAGES)


def _identifiers() -> tuple:
    """Load py3langid's model once; the question identifier shares its arrays (no second load)."""
    global _IDENTIFIERS
    with _LOCK:
        if _IDENTIFIERS is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            whole = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            restricted = LanguageIdentifier(whole.nb_ptc, whole.nb_pc, whole.nb_classes, whole.tk_nextmove,
                                            whole.tk_output, norm_probs=True, tk_row=whole.tk_row)
            restricted.set_languages(sorted(QUESTION_LANGUAGES))
            _IDENTIFIERS = whole, restricted
    return _IDENTIFIERS


def _letters(text: str) -> int:
    return sum(ch.isalpha() for ch in text)


def _sample(text: str, limit: int | None = None) -> str:
    """The lines of ``text`` that are mostly letters, at most ~``limit`` characters spread over it.

    Page numbers, tables of figures, dot leaders and code such as ``x <- c(1, 2)`` are mostly
    digits and punctuation: their n-grams say little about the language, so they are left out.
    """
    limit = limit or config.DETECT_SAMPLE_CHARS
    if len(text) > 5 * limit:  # a long text: five windows spread over it, not just its first pages
        step = len(text) // 5
        text = "\n".join(text[i * step : i * step + limit] for i in range(5))
    kept = []
    for line in text.splitlines():
        line = line.strip()
        letters = _letters(line)
        if letters >= 2 and letters >= 0.5 * sum(not ch.isspace() for ch in line):
            kept.append(line)
    total = sum(len(line) + 1 for line in kept)
    if total > limit:  # every k-th line, so the sample spans the text
        kept = kept[:: -(-total // limit)]
    return "\n".join(kept)


def detect_language(text: str) -> str | None:
    """The code of the main language of ``text`` (a document's first pages), or None when unsure.

    detect_language("Diese Debian-Referenz wurde geschrieben, um ...")  -> "de"   (given ~200 letters)
    detect_language("Figure 3")                                         -> None   (too little to tell)

    Codes are py3langid's: ISO 639-1 where one exists ("de", "ja"), else ISO 639-3 ("yue").
    """
    sample = _sample(text)
    if _letters(sample) < config.DETECT_MIN_LETTERS:
        return None
    code, confidence = _identifiers()[0].classify(sample)
    if code == "zxx" or confidence < config.DETECT_MIN_CONFIDENCE:  # zxx: "no linguistic content"
        return None
    return code


# A letter of a script that names the language by itself (Cyrillic, Arabic, Thai, Hangul, kana, Han)
_TELLING_SCRIPT = re.compile(r"[\u0400-\u04ff\u0600-\u06ff\u0e00-\u0e7f\u1100-\u11ff\u3040-\u30ff\u3400-\u4dbf"
                             r"\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[^\W\d_]+")


def question_language(text: str, default: str = "en") -> str:
    """The language of a question, among QUESTION_LANGUAGES; ``default`` when unsure.

    question_language("Wie installiere ich ein Paket?")  -> "de"
    question_language("パッケージをインストールするには？")     -> "ja"
    question_language("plot sin(x)")                     -> "en"   (two words: too few to tell)
    """
    if len(_LATIN_WORD.findall(text)) < config.QUESTION_MIN_WORDS and not _TELLING_SCRIPT.search(text):
        return default
    code, confidence = _identifiers()[1].classify(text)
    return code if confidence >= config.QUESTION_MIN_CONFIDENCE else default


# -----------------------------------------------------------------------------
# Stopwords and stemmers: what keyword search drops and how it folds word forms

# stopwords-iso merges many sources, and for these languages it drops words people search
# for (German "zeit", "jahr", "beispiel", "ordnung", "r"; French "valeur", "état", "sujet";
# Spanish "trabajo", "valor", "ejemplo" and the digits 0-9; Italian "tempo", "esempio";
# Portuguese "trabalho", "valor"; Russian "время", "работа"). They use Snowball's lists,
# which hold function words only (https://snowballstem.org/algorithms/<language>/stop.txt;
# Russian without its two nouns "жизнь", "человек", Spanish without "estado(s)", German with
# the spelled-out "unsere..." and "dass" its stemmed forms stand for).
_SNOWBALL_STOPWORDS = {
    "de": """aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes anderm
        andern anderr anders auch auf aus bei bin bis bist da damit dann das dasselbe dass dazu daß dein deine deinem
        deinen deiner deines dem demselben den denn denselben der derer derselbe derselben des desselben dessen dich
        die dies diese dieselbe dieselben diesem diesen dieser dieses dir doch dort du durch ein eine einem einen einer
        eines einig einige einigem einigen einiger einiges einmal er es etwas euch euer eure eurem euren eurer eures für
        gegen gewesen hab habe haben hat hatte hatten hier hin hinter ich ihm ihn ihnen ihr ihre ihrem ihren ihrer ihres
        im in indem ins ist jede jedem jeden jeder jedes jene jenem jenen jener jenes jetzt kann kein keine keinem keinen
        keiner keines können könnte machen man manche manchem manchen mancher manches mein meine meinem meinen meiner
        meines mich mir mit muss musste nach nicht nichts noch nun nur ob oder ohne sehr sein seine seinem seinen seiner
        seines selbst sich sie sind so solche solchem solchen solcher solches soll sollte sondern sonst um und uns unse
        unsem unsen unser unses unsere unserem unseren unserer unseres unter viel vom von vor war waren warst was weg
        weil weiter welche welchem welchen welcher welches wenn werde werden wie wieder will wir wird wirst wo wollen
        wollte während würde würden zu zum zur zwar zwischen über""",
    "fr": """ai aie aient aies ait au aurai auraient aurais aurait auras aurez auriez aurions aurons auront aux avaient
        avais avait avec avez aviez avions avons ayant ayez ayons c ce ceci cela celà ces cet cette d dans de des du elle
        en es est et eu eue eues eurent eus eusse eussent eusses eussiez eussions eut eux eûmes eût eûtes furent fus
        fusse fussent fusses fussiez fussions fut fûmes fût fûtes ici il ils j je l la le les leur leurs lui m ma mais me
        mes moi mon même n ne nos notre nous on ont ou par pas pour qu que quel quelle quelles quels qui s sa sans se
        sera serai seraient serais serait seras serez seriez serions serons seront ses soi soient sois soit sommes son
        sont soyez soyons suis sur t ta te tes toi ton tu un une vos votre vous y à étaient étais était étant étiez
        étions été étée étées étés êtes""",
    "es": """a al algo algunas algunos ante antes como con contra cual cuando de del desde donde durante e el ella ellas
        ellos en entre era erais eran eras eres es esa esas ese eso esos esta estaba estabais estaban estabas estad
        estada estadas estamos estando estar estaremos estará estarán estarás estaré estaréis estaría estaríais
        estaríamos estarían estarías estas este estemos esto estos estoy estuve estuviera estuvierais estuvieran
        estuvieras estuvieron estuviese estuvieseis estuviesen estuvieses estuvimos estuviste estuvisteis estuviéramos
        estuviésemos estuvo está estábamos estáis están estás esté estéis estén estés fue fuera fuerais fueran fueras
        fueron fuese fueseis fuesen fueses fui fuimos fuiste fuisteis fuéramos fuésemos ha habida habidas habido habidos
        habiendo habremos habrá habrán habrás habré habréis habría habríais habríamos habrían habrías habéis había
        habíais habíamos habían habías han has hasta hay haya hayamos hayan hayas hayáis he hemos hube hubiera hubierais
        hubieran hubieras hubieron hubiese hubieseis hubiesen hubieses hubimos hubiste hubisteis hubiéramos hubiésemos
        hubo la las le les lo los me mi mis mucho muchos muy más mí mía mías mío míos nada ni no nos nosotras nosotros
        nuestra nuestras nuestro nuestros o os otra otras otro otros para pero poco por porque que quien quienes qué se
        sea seamos sean seas seremos será serán serás seré seréis sería seríais seríamos serían serías seáis sido
        siendo sin sobre sois somos son soy su sus suya suyas suyo suyos sí también tanto te tendremos tendrá tendrán
        tendrás tendré tendréis tendría tendríais tendríamos tendrían tendrías tened tenemos tenga tengamos tengan tengas
        tengo tengáis tenida tenidas tenido tenidos teniendo tenéis tenía teníais teníamos tenían tenías ti tiene
        tienen tienes todo todos tu tus tuve tuviera tuvierais tuvieran tuvieras tuvieron tuviese tuvieseis tuviesen
        tuvieses tuvimos tuviste tuvisteis tuviéramos tuviésemos tuvo tuya tuyas tuyo tuyos tú un una uno unos vosotras
        vosotros vuestra vuestras vuestro vuestros y ya yo él éramos""",
    "it": """a abbia abbiamo abbiano abbiate ad agl agli ai al all alla alle allo anche avemmo avendo avesse avessero
        avessi avessimo aveste avesti avete aveva avevamo avevano avevate avevi avevo avrai avranno avrebbe avrebbero
        avrei avremmo avremo avreste avresti avrete avrà avrò avuta avute avuti avuto c che chi ci coi col come con
        contro cui da dagl dagli dai dal dall dalla dalle dallo degl degli dei del dell della delle dello di dov dove e
        ebbe ebbero ebbi ed era erano eravamo eravate eri ero essendo faccia facciamo facciano facciate faccio facemmo
        facendo facesse facessero facessi facessimo faceste facesti faceva facevamo facevano facevate facevi facevo fai
        fanno farai faranno farebbe farebbero farei faremmo faremo fareste faresti farete farà farò fece fecero feci
        fosse fossero fossi fossimo foste fosti fu fui fummo furono gli ha hai hanno ho i il in io l la le lei li lo
        loro lui ma mi mia mie miei mio ne negl negli nei nel nell nella nelle nello noi non nostra nostre nostri nostro
        o per perché più quale quanta quante quanti quanto quella quelle quelli quello questa queste questi questo sarai
        saranno sarebbe sarebbero sarei saremmo saremo sareste saresti sarete sarà sarò se sei si sia siamo siano siate
        siete sono sta stai stando stanno starai staranno starebbe starebbero starei staremmo staremo stareste staresti
        starete starà starò stava stavamo stavano stavate stavi stavo stemmo stesse stessero stessi stessimo steste
        stesti stette stettero stetti stia stiamo stiano stiate sto su sua sue sugl sugli sui sul sull sulla sulle sullo
        suo suoi ti tra tu tua tue tuo tuoi tutti tutto un una uno vi voi vostra vostre vostri vostro è""",
    "pt": """a ao aos aquela aquelas aquele aqueles aquilo as até com como da das de dela delas dele deles depois do dos
        e ela elas ele eles em entre era eram essa essas esse esses esta estamos estas estava estavam este esteja
        estejam estejamos estes esteve estive estivemos estiver estivera estiveram estiverem estivermos estivesse
        estivessem estivéramos estivéssemos estou está estávamos estão eu foi fomos for fora foram forem formos fosse
        fossem fui fôramos fôssemos haja hajam hajamos havemos hei houve houvemos houver houvera houveram houverei
        houverem houveremos houveria houveriam houvermos houverá houverão houveríamos houvesse houvessem houvéramos
        houvéssemos há hão isso isto já lhe lhes mais mas me mesmo meu meus minha minhas muito na nas nem no nos nossa
        nossas nosso nossos num numa não nós o os ou para pela pelas pelo pelos por qual quando que quem se seja sejam
        sejamos sem serei seremos seria seriam será serão seríamos seu seus somos sou sua suas são só também te tem
        temos tenha tenham tenhamos tenho terei teremos teria teriam terá terão teríamos teu teus teve tinha tinham tive
        tivemos tiver tivera tiveram tiverem tivermos tivesse tivessem tivéramos tivéssemos tu tua tuas tém tínhamos um
        uma você vocês vos à às éramos""",
    "ru": """а без более больше будет будто бы был была были было быть в вам вас вдруг ведь во вот впрочем все всегда
        всего всех всю вы где говорил да даже два для до другой его ее ей ему если есть еще ж же за зачем здесь и из
        или им иногда их к кажется как какая какой когда конечно кто куда ли лучше между меня мне много может можно мой
        моя мы на над надо наконец нас не него нее ней нельзя нет ни нибудь никогда ним них ничего но ну о об один он
        она они опять от перед по под после потом потому почти при про раз разве с сам свою себе себя сегодня сейчас
        сказал сказала сказать со совсем так такой там тебя тем теперь то тогда того тоже только том тот три тут ты у
        уж уже хорошо хоть чего чем через что чтоб чтобы чуть эти этого этой этом этот эту я""",
}

# ISO code -> snowballstemmer's algorithm name (the ones the installed package has are used)
_STEMMER_NAMES = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish", "nl": "dutch",
    "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french", "de": "german",
    "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish", "it": "italian",
    "lt": "lithuanian", "ne": "nepali", "no": "norwegian", "nn": "norwegian", "fa": "persian", "pl": "polish",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian", "st": "sesotho", "es": "spanish",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}
_NO_DIGIT = re.compile(r"^[^\d]*[^\W\d_][^\d]*$")  # a stopword entry with a letter and no digit


@lru_cache(maxsize=None)
def stopwords(code: str) -> frozenset[str]:
    """The words keyword search drops in language ``code`` (lower-case); empty when it has no list.

    Snowball's function-word lists for de, fr, es, it, pt, ru; stopwords-iso's for the others,
    without its entries that are digits or punctuation (Korean's list holds "0".."9" and "?").
    """
    if code in _SNOWBALL_STOPWORDS:
        return frozenset(_SNOWBALL_STOPWORDS[code].split())
    import stopwordsiso

    if not code or not stopwordsiso.has_lang(code):
        return frozenset()
    return frozenset(w.lower() for w in stopwordsiso.stopwords(code) if _NO_DIGIT.match(w))


class _Stemmer:
    """A Snowball stemmer for one language, safe to share between threads, with a cache of words seen."""

    def __init__(self, algorithm: str):
        import snowballstemmer

        self._stemmer = snowballstemmer.stemmer(algorithm)
        self._lock = threading.Lock()
        self.stem = lru_cache(maxsize=100_000)(self._stem)

    def _stem(self, word: str) -> str:
        with self._lock:  # a Snowball stemmer keeps its state in the object while it works
            return self._stemmer.stemWord(word)


@lru_cache(maxsize=None)
def stemmer(code: str) -> _Stemmer | None:
    """The Snowball stemmer of language ``code`` (``stemmer("de").stem("pakete") -> "pak"``), or None."""
    import snowballstemmer

    name = _STEMMER_NAMES.get(code or "")
    return _Stemmer(name) if name in snowballstemmer.algorithms() else None


# -----------------------------------------------------------------------------
# What the app can do for a language


def support(code: str) -> str:
    """How well a document in language ``code`` is searched.

    "full":     found by meaning (the embedder knows the language) and by its words, with
                stopwords dropped and word forms folded (a stemmer, or character pairs for
                scripts without spaces).
    "keywords": found by its words only: the meaning search does not know the language.

    support("de") -> "full";  support("sv") -> "keywords"
    """
    if code == "en":
        return "full"
    if code in MEANING_LANGUAGES and stopwords(code) and (stemmer(code) or code in UNSPACED_LANGUAGES):
        return "full"
    return "keywords"


def support_message(code: str | None) -> str | None:
    """One sentence for the upload screen about a document in language ``code``; None when all is well.

    support_message("de") -> None
    support_message("sv") -> "Swedish: searched by its words only — the meaning search does not know
                              Swedish, so questions worded differently from the page may miss it."

    No message either when the language could not be told (``code`` None or ""): there is nothing sure to say.
    """
    if not code or support(code) == "full":
        return None
    name = language_name(code)
    return (f"{name}: searched by its words only — the meaning search does not know {name}, "
            f"so questions worded differently from the page may miss it.")
