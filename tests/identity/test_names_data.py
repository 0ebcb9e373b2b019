"""Table S6b country lists: verbatim entries, and every ISO code checked against pycountry."""

from __future__ import annotations

import pytest

from harness.identity.build import country_lists

S6B_NHPI = ['American Samoa', 'Cook Island', 'Cook Islands', 'East Timor', 'Fiji', 'French Polynesia', 'Guam',
            'I-Kiribati', 'Kiribati', 'Marshall Islands', 'Marshallese', 'Micronesia', 'Nauru', 'New Caledonia',
            'Ni-Vanuatu', 'Niue', 'Norfolk Island', 'Northern Mariana Islands', 'Palau', 'Pitcairn Islands',
            'Samoa', 'Solomon Island', 'Solomon Islands', 'Timor-Leste', 'Timorese', 'Tokelau', 'Tonga',
            'Tuvalu', 'Vanuatu', 'Wallis and Futuna']
S6B_MENA = ['Algeria', 'Bahrain', 'Egypt', 'Iran', 'Iraq', 'Israel', 'Jordan', 'Kuwait', 'Lebanese', 'Lebanon',
            'Libya', 'Moroccan', 'Morocco', 'Oman', 'Palestine', 'Palestinian', 'Qatar', 'Sahrawi', 'Saudi',
            'Saudi Arabia', 'Syria', 'Tunisia', 'Turkey', 'Turkish', 'United Arab Emirates', 'Yemen']


def test_entries_verbatim():
    lists = country_lists()
    assert list(lists["nhpi"]) == S6B_NHPI
    assert list(lists["mena"]) == S6B_MENA


# Entries pycountry cannot resolve by name (demonyms, old names), with the country they denote.
BY_HAND = {"East Timor": "Timor-Leste", "I-Kiribati": "Kiribati", "Marshallese": "Marshall Islands",
           "Ni-Vanuatu": "Vanuatu", "Pitcairn Islands": "Pitcairn", "Timorese": "Timor-Leste",
           "Moroccan": "Morocco", "Palestinian": "Palestine, State of", "Sahrawi": "Western Sahara",
           "Turkey": "Türkiye", "Turkish": "Türkiye"}


@pytest.mark.parametrize("group", ["nhpi", "mena"])
def test_codes_match_pycountry(group):
    pycountry = pytest.importorskip("pycountry")
    for entry, code in country_lists()[group].items():
        c = pycountry.countries.get(alpha_2=code)
        assert c is not None, (entry, code)
        if entry in BY_HAND:
            assert c.name == BY_HAND[entry], (entry, code, c.name)
            continue
        try:
            fuzzy = {x.alpha_2 for x in pycountry.countries.search_fuzzy(entry)}
        except LookupError:
            fuzzy = set()
        assert code in fuzzy or entry.lower() in c.name.lower(), (entry, code, c.name, fuzzy)
