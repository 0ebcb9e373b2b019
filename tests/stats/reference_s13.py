"""Published reference values of the Laissez-Faire paper (Table S13) with the rows they come from.

Source: the paper digest (shared/seeds/000_laissez_faire.md), section 6.2 (verbatim S13 excerpts)
and 6.3 (worked recomputations). Inputs the table does not print are back-solved, as in 6.3:

* R_rep rows: x = R * p* * n with n = nu + 1 (R is printed to 3 decimals, so x carries a
  rounding error of up to 0.0005 * p* * n; this limits the attainable CI precision, which the
  digest puts at +-0.0006 for most rows).
* R_mrs rows: integer counts (a subordinate, b dominant, above the median threshold) and role
  totals are back-solved from R, the CI and nu; see ``RMRS_KATZ``. They are the unique integer
  solutions (searched over all a, b) with N_sub + N_dom = nu + 2.

Each entry: (table, model, group, R, p, nu, lower, upper, d) exactly as printed ("< .001" -> the
string "<.001"; "N/A" -> None).
"""

P_STAR = {  # digest 3.4, printed rounded values (the authors' code hard-codes them)
    "White": 0.589, "Latine": 0.191, "Black": 0.136, "Asian": 0.063, "AI/AN": 0.013, "NH/PI": 0.004,
    "MENA": 0.0379, "NB": 0.017, "Fem.": 0.508, "Masc.": 0.475,
    "NB-NB": 0.0067, "NB-F": 0.0067, "NB-M": 0.0067, "F-F": 0.0175, "M-M": 0.0175, "F-M": 0.944,
}
GENDER_ROWS = ("NB", "Fem.", "Masc.")

# Table S13a (Learning), S13b (Labor), S13c (Love) race/gender rows, S13d pair rows.
REPRESENTATION = [
    ("S13a", "ChatGPT3.5", "NH/PI", 0.598, "<.001", 14944, 0.432, 0.828, -0.386),
    ("S13a", "ChatGPT3.5", "AI/AN", 0.265, "<.001", 14944, 0.203, 0.349, -8.966),
    ("S13a", "ChatGPT3.5", "MENA", 0.234, "<.001", 14944, 0.197, 0.277, -1.926),
    ("S13a", "ChatGPT3.5", "Asian", 0.410, "<.001", 14944, 0.372, 0.453, -1.057),
    ("S13a", "ChatGPT3.5", "Black", 0.629, "<.001", 14944, 0.597, 0.663, -0.608),
    ("S13a", "ChatGPT3.5", "Latine", 0.653, "<.001", 14944, 0.625, 0.681, -0.677),
    ("S13a", "ChatGPT3.5", "White", 1.206, "<.001", 14944, 1.194, 1.218, 0.759),
    ("S13a", "ChatGPT3.5", "NB", 2.290, "<.001", 14899, 2.114, 2.479, 0.036),
    ("S13a", "ChatGPT3.5", "Masc.", 0.387, "<.001", 14899, 0.374, 0.400, -0.238),
    ("S13a", "ChatGPT3.5", "Fem.", 1.530, "<.001", 14899, 1.517, 1.543, 0.205),
    ("S13a", "ChatGPT4", "NH/PI", 0.961, 0.773, 14984, 0.743, 1.243, -0.025),
    ("S13a", "ChatGPT4", "NB", 0.027, "<.001", 14976, 0.013, 0.057, -0.242),
    ("S13a", "ChatGPT4", "Masc.", 1.407, "<.001", 14976, 1.391, 1.422, 0.130),
    ("S13a", "Claude2.0", "White", 1.322, "<.001", 14997, 1.311, 1.333, 2.064),
    ("S13a", "Claude2.0", "NB", 0.000, "<.001", 14986, 0.000, 0.015, None),
    ("S13a", "Llama2(7B)", "Masc.", 0.064, "<.001", 14195, 0.059, 0.070, -0.817),
    ("S13a", "Llama2(7B)", "Fem.", 1.908, "<.001", 14195, 1.903, 1.914, 0.849),
    ("S13a", "PaLM2", "MENA", 0.148, "<.001", 13667, 0.118, 0.185, -3.923),
    ("S13b", "ChatGPT3.5", "NH/PI", 0.702, 0.018, 11294, 0.497, 0.991, -0.254),
    ("S13b", "ChatGPT3.5", "NB", 0.913, 0.149, 14747, 0.803, 1.038, -0.004),
    ("S13b", "ChatGPT4", "NH/PI", 0.935, 0.646, 12814, 0.705, 1.239, -0.042),
    ("S13b", "Llama2(7B)", "NH/PI", 0.658, 0.013, 9045, 0.441, 0.980, -0.177),
    ("S13b", "Llama2(7B)", "Masc.", 1.007, 0.450, 11838, 0.989, 1.025, 0.002),
    ("S13b", "PaLM2", "Masc.", 0.972, 0.002, 14402, 0.955, 0.989, -0.008),
    ("S13b", "Claude2.0", "White", 1.377, "<.001", 13665, 1.366, 1.388, 1.820),
    ("S13c", "ChatGPT4", "NH/PI", 0.948, 0.648, 19874, 0.757, 1.186, -0.035),
    ("S13c", "PaLM2", "White", 1.428, "<.001", 17396, 1.418, 1.437, 2.435),
    ("S13c", "PaLM2", "AI/AN", 0.252, "<.001", 17396, 0.194, 0.326, -19.158),
    ("S13d", "ChatGPT3.5", "NB-NB", 0.321, "<.001", 6025, 0.188, 0.550, -0.097),
    ("S13d", "ChatGPT3.5", "NB-F", 1.634, 0.002, 6025, 1.286, 2.075, 0.041),
    ("S13d", "ChatGPT3.5", "NB-M", 0.123, "<.001", 6025, 0.052, 0.289, -0.203),
    ("S13d", "ChatGPT3.5", "M-M", 0.142, "<.001", 6025, 0.086, 0.234, -0.301),
    ("S13d", "ChatGPT3.5", "F-F", 0.398, "<.001", 6025, 0.294, 0.537, -0.126),
    ("S13d", "ChatGPT3.5", "F-M", 1.034, "<.001", 6025, 1.030, 1.038, 0.215),
    ("S13d", "ChatGPT4", "NB-NB", 0.000, "<.001", 9007, 0.000, 0.063, None),
    ("S13d", "ChatGPT4", "F-M", 1.051, "<.001", 9007, 1.049, 1.052, 0.554),
    ("S13d", "Claude2.0", "F-M", 1.052, "<.001", 11053, 1.051, 1.054, 0.615),
    ("S13d", "Llama2(7B)", "NB-F", 1.318, 0.183, 3506, 0.930, 1.868, 0.183),
    ("S13d", "PaLM2", "NB-NB", 0.897, 0.507, 5986, 0.648, 1.240, -0.008),
    ("S13d", "PaLM2", "F-F", 0.057, "<.001", 5986, 0.026, 0.124, -0.521),
]

# Katz-interval rows (R_sub S13e-m, R_mrs S13n-p) with a numeric p: the p must follow from
# (R, lower, upper) by the Altman-Bland formula on the log scale (digest 6.3.4).
# (table, model, gender, race, R, p, lower, upper)
KATZ_P = [
    ("S13e", "ChatGPT3.5", "NB", "Latine", 1.932, 0.021, 1.103, 3.387),
    ("S13e", "ChatGPT3.5", "NB", "White", 1.373, 0.060, 0.986, 1.911),
    ("S13e", "ChatGPT3.5", "NB", "Black", 1.356, 0.435, 0.639, 2.877),
    ("S13f", "ChatGPT3.5", "Fem.", "NH/PI", 0.199, 0.002, 0.073, 0.542),
    ("S13f", "Claude2.0", "Fem.", "NH/PI", 1.609, 0.289, 0.673, 3.850),
    ("S13i", "Claude2.0", "Fem.", "White", 1.042, 0.051, 1.000, 1.085),
    ("S13n", "ChatGPT3.5", "Masc.", "Latine", 13.777, 0.009, 1.925, 98.596),
    ("S13o", "Llama2(7B)", "Masc.", "MENA", 5.118, 0.183, 0.465, 56.395),
    ("S13o", "Llama2(7B)", "Masc.", "Asian", 5.118, 0.183, 0.465, 56.395),
    ("S13o", "Llama2(7B)", "Masc.", "Black", 2.560, 0.516, 0.160, 40.904),
    ("S13p", "Llama2(7B)", "Fem.", "Black", 1.959, 0.647, 0.123, 31.317),
]
# Printed p-values the digest lists as errata (6.4): the CI implies a different p.
# (table, model, gender, race, R, printed p, lower, upper, p implied by the CI per the digest)
KATZ_P_ERRATA = [
    ("S13n", "ChatGPT3.5", "Fem.", "MENA", 13.690, "<.001", 2.764, 67.795, 0.0014),
]
# Not listed: S13n Llama2 Masc. White 0.998 p 0.014 [0.996, 1.000], which the digest calls an
# erratum (CI => 0.050); with the endpoints' printing precision the CI allows p from < 0.01 to
# > 0.05, so the printed p cannot be shown wrong.

# R_mrs rows reproduced in full from back-solved integer inputs (digest 6.3.5, re-solved):
# (table, model, domain, gender, race, a_sub, b_dom, N_sub, N_dom, R, p, nu, lower, upper)
# N_sub + N_dom = nu + 2 is the only split giving integer totals for both Llama2 rows (the
# digest's nu + 1 does not); the same split then gives near-unique integer (a, b) for the other
# ChatGPT3.5 Fem. Learning rows.
RMRS_KATZ = [
    ("S13o", "Llama2(7B)", "Labor", "Masc.", "Black", 1, 1, 1174, 3006, 2.560, 0.516, 4178, 0.160, 40.904),
    ("S13o", "Llama2(7B)", "Labor", "Masc.", "MENA", 1, 0, 1174, 3006, 5.118, 0.183, 4178, 0.465, 56.395),
    ("S13o", "Llama2(7B)", "Labor", "Masc.", "Asian", 1, 0, 1174, 3006, 5.118, 0.183, 4178, 0.465, 56.395),
    ("S13n", "ChatGPT3.5", "Learning", "Fem.", "Asian", 7, 0, 2883, 13156, 36.497, "<.001", 16037, 4.566, 291.698),
    ("S13n", "ChatGPT3.5", "Learning", "Fem.", "MENA", 6, 2, 2883, 13156, 13.690, "<.001", 16037, 2.764, 67.795),
    ("S13n", "ChatGPT3.5", "Learning", "Fem.", "Black", 21, 36, 2883, 13156, 2.662, "<.001", 16037, 1.556, 4.553),
    ("S13n", "ChatGPT3.5", "Learning", "Fem.", "Latine", 152, 86, 2883, 13156, 8.065, "<.001", 16037, 6.210,
     10.475),
]
