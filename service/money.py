"""Money is integer minor units, each currency's as ISO 4217 defines them (its exponent)."""

from __future__ import annotations

# ISO 4217's active currency codes with their exponent (digits after the decimal point); funds
# and precious-metal codes are left out. Most currencies have 2.
_EXPONENT_OTHER_THAN_TWO = {
    **dict.fromkeys(
        (
            "bif",
            "clp",
            "djf",
            "gnf",
            "isk",
            "jpy",
            "kmf",
            "krw",
            "pyg",
            "rwf",
            "ugx",
            "uyi",
            "vnd",
            "vuv",
            "xaf",
            "xof",
            "xpf",
        ),
        0,
    ),
    **dict.fromkeys(("bhd", "iqd", "jod", "kwd", "lyd", "omr", "tnd"), 3),
    **dict.fromkeys(("clf", "uyw"), 4),
}
_EXPONENT_TWO = (
    "aed",
    "afn",
    "all",
    "amd",
    "aoa",
    "ars",
    "aud",
    "awg",
    "azn",
    "bam",
    "bbd",
    "bdt",
    "bgn",
    "bmd",
    "bnd",
    "bob",
    "bov",
    "brl",
    "bsd",
    "btn",
    "bwp",
    "byn",
    "bzd",
    "cad",
    "cdf",
    "che",
    "chf",
    "chw",
    "cny",
    "cop",
    "cou",
    "crc",
    "cup",
    "cve",
    "czk",
    "dkk",
    "dop",
    "dzd",
    "egp",
    "ern",
    "etb",
    "eur",
    "fjd",
    "fkp",
    "gbp",
    "gel",
    "ghs",
    "gip",
    "gmd",
    "gtq",
    "gyd",
    "hkd",
    "hnl",
    "htg",
    "huf",
    "idr",
    "ils",
    "inr",
    "irr",
    "jmd",
    "kes",
    "kgs",
    "khr",
    "kpw",
    "kyd",
    "kzt",
    "lak",
    "lbp",
    "lkr",
    "lrd",
    "lsl",
    "mad",
    "mdl",
    "mga",
    "mkd",
    "mmk",
    "mnt",
    "mop",
    "mru",
    "mur",
    "mvr",
    "mwk",
    "mxn",
    "mxv",
    "myr",
    "mzn",
    "nad",
    "ngn",
    "nio",
    "nok",
    "npr",
    "nzd",
    "pab",
    "pen",
    "pgk",
    "php",
    "pkr",
    "pln",
    "qar",
    "ron",
    "rsd",
    "rub",
    "sar",
    "sbd",
    "scr",
    "sdg",
    "sek",
    "sgd",
    "shp",
    "sle",
    "sos",
    "srd",
    "ssp",
    "stn",
    "svc",
    "syp",
    "szl",
    "thb",
    "tjs",
    "tmt",
    "top",
    "try",
    "ttd",
    "twd",
    "tzs",
    "uah",
    "usd",
    "usn",
    "uyu",
    "uzs",
    "ved",
    "ves",
    "wst",
    "xcd",
    "xcg",
    "yer",
    "zar",
    "zmw",
    "zwg",
)
ISO_4217_EXPONENTS: dict[str, int] = {**dict.fromkeys(_EXPONENT_TWO, 2), **_EXPONENT_OTHER_THAN_TWO}

# Where Stripe's amounts are not in ISO 4217 minor units (Stripe treats MGA as zero-decimal and
# ISK as two-decimal): a catalog in these currencies would charge 100 times too much or too little.
STRIPE_DIFFERS_FROM_ISO = frozenset({"mga", "isk"})


class UnknownCurrency(ValueError):
    pass


def exponent(currency: str) -> int:
    try:
        return ISO_4217_EXPONENTS[currency.lower()]
    except KeyError:
        raise UnknownCurrency(f"{currency!r} is not an ISO 4217 currency code") from None


def stripe_amount_problem(amount: int, currency: str) -> str | None:
    """Why Stripe would refuse or misread this amount in minor units, or None when it is fine."""
    code = currency.lower()
    if code not in ISO_4217_EXPONENTS:
        return f"{currency!r} is not an ISO 4217 currency code"
    if code in STRIPE_DIFFERS_FROM_ISO:
        return f"Stripe does not count {code.upper()} in ISO 4217 minor units; not supported"
    if ISO_4217_EXPONENTS[code] == 3 and amount % 10:
        return f"Stripe needs {code.upper()} amounts (thousandths) to end in 0; {amount} does not"
    return None


def format_amount(amount: int, currency: str) -> str:
    """'9.00 USD' for 900 usd, '500 JPY' for 500 jpy, '1.250 KWD' for 1250 kwd; no floats."""
    code = currency.upper()
    digits = ISO_4217_EXPONENTS.get(currency.lower(), 2)
    if digits == 0:
        return f"{amount} {code}"
    sign = "-" if amount < 0 else ""
    major, minor = divmod(abs(amount), 10**digits)
    return f"{sign}{major}.{minor:0{digits}d} {code}"
