//! `chunked_prefill::random::Generator` against numpy's `default_rng`, bit for bit.
//!
//! The fixtures below are the output of this script (numpy 2.4.6): its output replaces
//! the block from the `// numpy` line to `WORDS_RANDOM`, then `rustfmt --edition 2021`
//! formats it. Floats are printed with `repr`, which round-trips, so each literal
//! parses to numpy's exact `f64`; the tests compare `to_bits()`.
//!
//! ```python
//! import math
//! import numpy as np
//!
//! SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 - 1]
//! MU, SIGMA = math.log(256), 1.1
//! TAIL = {"standard_normal": 3.6541528853610087963519472518,
//!         "standard_exponential": 7.6971174701310497140446280481}
//! AT = [0, 1, 2, 999, 123_456, 500_000, 999_999]
//! SEED_LISTS = [[42, 24], [2**32 + 5, 12], [0], [2**64 - 1, 2**33, 7]]
//! WORDS = [1, 2, 3, 4, 5, 6]
//!
//!
//! def floats(xs):
//!     return "[" + ", ".join(repr(float(x)) for x in xs) + "]"
//!
//!
//! def digest(xs):
//!     bits = np.asarray(xs, dtype=np.float64).view(np.uint64)
//!     xor, total = np.bitwise_xor.reduce(bits), bits.sum(dtype=np.uint64)
//!     return f"Digest {{ xor: {int(xor):#018x}, sum: {int(total):#018x} }}"
//!
//!
//! print(f"// numpy {np.__version__}")
//! print(f"const CASES: [Case; {len(SEEDS)}] = [")
//! for seed in SEEDS:
//!     g = np.random.default_rng
//!     print(f"Case {{ seed: {seed}, random: {floats(g(seed).random(8))},")
//!     print(f"standard_normal: {floats(g(seed).standard_normal(8))},")
//!     print(f"standard_exponential: {floats(g(seed).standard_exponential(8))},")
//!     print(f"lognormal: {floats(g(seed).lognormal(MU, SIGMA, 8))} }},")
//! print("];")
//! for name, tail in TAIL.items():
//!     xs = getattr(np.random.default_rng(7), name)(1_000_000)
//!     at = ", ".join(f"({i}, {float(xs[i])!r})" for i in AT)
//!     print(f"const {name.upper()}_RUN: LongRun = LongRun {{ at: [{at}],")
//!     print(f"digest: {digest(xs)}, beyond_tail: {int((np.abs(xs) > tail).sum())} }};")
//! rng, mixed = np.random.default_rng(2024), []
//! for _ in range(100_000):
//!     mixed += [rng.random(), rng.standard_normal(), rng.standard_exponential(),
//!               rng.lognormal(MU, SIGMA)]
//! print(f"const INTERLEAVED_HEAD: [f64; 12] = {floats(mixed[:12])};")
//! print(f"const INTERLEAVED_DIGEST: Digest = {digest(mixed)};")
//! print(f"const SEED_LISTS: [(&[u64], [f64; 4]); {len(SEED_LISTS)}] = [")
//! for seeds in SEED_LISTS:
//!     print(f"(&{seeds}, {floats(np.random.default_rng(seeds).random(4))}),")
//! print("];")
//! words = np.array(WORDS, dtype=np.uint32)
//! print(f"const WORDS: [u32; {len(WORDS)}] = {WORDS};")
//! print(f"const WORDS_RANDOM: [f64; 4] = {floats(np.random.default_rng(words).random(4))};")
//! ```

use chunked_prefill::random::Generator;

/// The first eight draws of each kind, each kind from a fresh `default_rng(seed)`.
struct Case {
    seed: u64,
    random: [f64; 8],
    standard_normal: [f64; 8],
    standard_exponential: [f64; 8],
    lognormal: [f64; 8],
}

/// An exact checksum of a run: XOR and wrapping sum of the draws' `to_bits()`.
#[derive(Debug, PartialEq, Eq)]
struct Digest {
    xor: u64,
    sum: u64,
}

/// A million draws from `default_rng(7)`: a few at fixed indices, the checksum of all,
/// and how many fell beyond the ziggurat's tail start (only the tail branch gives those).
struct LongRun {
    at: [(usize, f64); 7],
    digest: Digest,
    beyond_tail: usize,
}

/// The fixtures' lognormal sigma, as in `lognormal(math.log(256), 1.1)`.
const LOGNORMAL_SIGMA: f64 = 1.1;
/// Where numpy's normal tail starts (`ziggurat_nor_r`, numpy's literal verbatim).
#[allow(clippy::excessive_precision)]
const NORMAL_TAIL: f64 = 3.6541528853610087963519472518;
/// Where numpy's exponential tail starts (`ziggurat_exp_r`, numpy's literal verbatim).
#[allow(clippy::excessive_precision)]
const EXPONENTIAL_TAIL: f64 = 7.6971174701310497140446280481;
/// Draws in each long run.
const LONG_RUN: usize = 1_000_000;

// numpy 2.4.6
const CASES: [Case; 7] = [
    Case {
        seed: 0,
        random: [
            0.6369616873214543,
            0.2697867137638703,
            0.04097352393619469,
            0.016527635528529094,
            0.8132702392002724,
            0.9127555772777217,
            0.6066357757671799,
            0.7294965609839984,
        ],
        standard_normal: [
            0.1257302210933933,
            -0.1321048632913019,
            0.6404226504432821,
            0.10490011715303971,
            -0.535669373161111,
            0.36159505490948474,
            1.3040000451301372,
            0.9470809631292422,
        ],
        standard_exponential: [
            0.6799319039689096,
            1.0195971014658647,
            0.019806662589055352,
            0.0022693266812281823,
            0.5503428726390482,
            1.6299404346583852,
            0.6735829526672319,
            0.7553013578253913,
        ],
        lognormal: [
            293.97087202404094,
            221.3758852264087,
            517.8275956693494,
            287.31166673216893,
            142.0161997729416,
            381.0505352871726,
            1074.4643035970948,
            725.5764946563822,
        ],
    },
    Case {
        seed: 1,
        random: [
            0.5118216247002567,
            0.9504636963259353,
            0.14415961271963373,
            0.9486494471372439,
            0.31183145201048545,
            0.42332644897257565,
            0.8277025938204418,
            0.4091991363691613,
        ],
        standard_normal: [
            0.345584192064786,
            0.8216181435011584,
            0.33043707618338714,
            -1.303157231604361,
            0.9053558666731177,
            0.4463745723640113,
            -0.5369532353602852,
            0.5811181041963531,
        ],
        standard_exponential: [
            1.0730290263725388,
            0.30845314412528435,
            5.375436872608127,
            0.36642711289983193,
            0.11536203910680366,
            1.7997970856557877,
            0.498639097854449,
            0.5514213768237073,
        ],
        lognormal: [
            374.39824449769856,
            632.0429826338435,
            368.21176766943006,
            61.05068920698932,
            693.0269572749485,
            418.2960661712887,
            141.8157791744742,
            485.12537325846245,
        ],
    },
    Case {
        seed: 42,
        random: [
            0.7739560485559633,
            0.4388784397520523,
            0.8585979199113825,
            0.6973680290593639,
            0.09417734788764953,
            0.9756223516367559,
            0.761139701990353,
            0.7860643052769538,
        ],
        standard_normal: [
            0.30471707975443135,
            -1.0399841062404955,
            0.7504511958064572,
            0.9405647163912139,
            -1.9510351886538364,
            -1.302179506862318,
            0.12784040316728537,
            -0.3162425923435822,
        ],
        standard_exponential: [
            2.4042086039659947,
            2.3361896558244535,
            2.384760999874255,
            0.2797942898515832,
            0.08643739969837702,
            1.4526605157061507,
            1.4099606942575735,
            3.1242959565494974,
        ],
        lognormal: [
            357.94030697669695,
            81.54825473026465,
            584.4514762132058,
            720.3942506604546,
            29.935310504883272,
            61.11638437443382,
            294.65402986121745,
            180.78538199677078,
        ],
    },
    Case {
        seed: 4294967295,
        random: [
            0.2519435680449965,
            0.21906579628685663,
            0.28728472043517017,
            0.6189813025326831,
            0.9350122911173898,
            0.2959666797266718,
            0.5204656682547232,
            0.2753575636458758,
        ],
        standard_normal: [
            -0.027271763074256376,
            0.2153539268318988,
            -0.6669252679186933,
            -1.165040684753369,
            0.7027991152627022,
            -0.3999360479976158,
            0.20996883063305435,
            0.19312968618279333,
        ],
        standard_exponential: [
            0.6123988124353253,
            1.9052409639945904,
            0.5479388597573891,
            1.326400465719826,
            0.8481478565881898,
            0.9633855442708354,
            3.1978267686383277,
            0.28215555620747546,
        ],
        lognormal: [
            248.43432008226907,
            324.4290162024114,
            122.92318520659363,
            71.0676820479655,
            554.6051789271518,
            164.88492258236667,
            322.51290733396723,
            316.5939694079927,
        ],
    },
    Case {
        seed: 4294967296,
        random: [
            0.8897387912781343,
            0.5571380502062263,
            0.8009080868919721,
            0.9565138174753386,
            0.05861516014935442,
            0.23640069529958085,
            0.7878121978721646,
            0.00030824035715149023,
        ],
        standard_normal: [
            0.10296768001436127,
            -0.9805271710302613,
            -0.8174783249223175,
            -1.027881871299033,
            -0.574458905742871,
            1.9711298228060992,
            0.39335673416765504,
            -0.002309162514376961,
        ],
        standard_exponential: [
            2.471254961500898,
            0.8826131030194506,
            0.683428493865234,
            0.7433686876874377,
            0.08253160451362569,
            0.8004611329066392,
            2.3206697317459395,
            0.0006751816894213066,
        ],
        lognormal: [
            286.7015824754178,
            87.06000176053809,
            104.16240702008248,
            82.64112070841009,
            136.08404164619674,
            2238.184330824771,
            394.59891819590257,
            255.35056499316616,
        ],
    },
    Case {
        seed: 9223372036854788153,
        random: [
            0.4941863433683745,
            0.5760172653236889,
            0.04269575705039841,
            0.8639690438686173,
            0.43391443846572697,
            0.6947395126431335,
            0.23443641074401056,
            0.8943486359892504,
        ],
        standard_normal: [
            0.7462161831451544,
            1.4135003149160374,
            -0.7554609942334952,
            1.5991911218060542,
            0.7429057444770557,
            -0.6361163246325523,
            -1.9163653023552445,
            -0.31069897738621194,
        ],
        standard_exponential: [
            1.3614335602976184,
            0.7145182287958117,
            0.03781262046414215,
            0.3711126673361071,
            1.3357536224859825,
            1.5557044146537606,
            0.3742371819328091,
            4.634056082427647,
        ],
        lognormal: [
            581.7351328455118,
            1212.0007566008642,
            111.51625341588323,
            1486.6606042310914,
            579.620606860654,
            127.16042615725512,
            31.098998369212108,
            181.89117512287206,
        ],
    },
    Case {
        seed: 18446744073709551615,
        random: [
            0.6800266789616931,
            0.8453117585624743,
            0.007403081599260064,
            0.8945681264391473,
            0.12896523452474162,
            0.3188385102672874,
            0.5894743473759847,
            0.18268758618247305,
        ],
        standard_normal: [
            0.7213364570768727,
            -0.9707961689465133,
            0.06922650485737146,
            -0.29658368621351155,
            -0.024826016879994986,
            -0.9700372425534345,
            1.0363918386502782,
            0.8060332346018148,
        ],
        standard_exponential: [
            2.112427437625879,
            1.199890102678443,
            0.007744092974540417,
            2.2246293372245356,
            0.48162439465926643,
            1.5409273072400167,
            1.7825100079708787,
            0.2107201680964597,
        ],
        lognormal: [
            566.0302642975861,
            87.99690634047725,
            276.2556209133672,
            184.73740598785074,
            249.103587973419,
            88.07039850474192,
            800.4775339290202,
            621.2999661216986,
        ],
    },
];
const STANDARD_NORMAL_RUN: LongRun = LongRun {
    at: [
        (0, 0.0012301533574825742),
        (1, 0.2987455375084699),
        (2, -0.2741378553622176),
        (999, -0.8254725722239247),
        (123456, 0.8508161435907338),
        (500000, 0.14392027719983985),
        (999999, 1.617001458485082),
    ],
    digest: Digest {
        xor: 0x01c8e795a6f85f0a,
        sum: 0x02a8cb0eddf071aa,
    },
    beyond_tail: 247,
};
const STANDARD_EXPONENTIAL_RUN: LongRun = LongRun {
    at: [
        (0, 0.7075292557919215),
        (1, 1.025203348294905),
        (2, 0.5685486573832514),
        (999, 0.7942703798636408),
        (123456, 0.09309474000807001),
        (500000, 1.6143501347976053),
        (999999, 1.9872482007549346),
    ],
    digest: Digest {
        xor: 0x7ffea73d23f79f61,
        sum: 0xe93d4e840c38a6dd,
    },
    beyond_tail: 444,
};
const INTERLEAVED_HEAD: [f64; 12] = [
    0.6758313379812818,
    1.6419200406711503,
    0.16921459825876747,
    87.76650865375474,
    0.9958020988654668,
    0.06719635507109722,
    0.23391936388163254,
    448.219435199399,
    0.35964689168935093,
    0.7508434731539183,
    1.0207660762377493,
    114.51692986273291,
];
const INTERLEAVED_DIGEST: Digest = Digest {
    xor: 0xfef0e5d1c69d60af,
    sum: 0xd3f57d8eb1068705,
};
const SEED_LISTS: [(&[u64], [f64; 4]); 4] = [
    (
        &[42, 24],
        [
            0.8869851976085418,
            0.6520168351776533,
            0.9647390409824448,
            0.6561636021182538,
        ],
    ),
    (
        &[4294967301, 12],
        [
            0.6980455531517117,
            0.5458030713926326,
            0.9190294106912856,
            0.4844065488853634,
        ],
    ),
    (
        &[0],
        [
            0.6369616873214543,
            0.2697867137638703,
            0.04097352393619469,
            0.016527635528529094,
        ],
    ),
    (
        &[18446744073709551615, 8589934592, 7],
        [
            0.734347586499291,
            0.3618437897410508,
            0.9870900229766222,
            0.32332021048501003,
        ],
    ),
];
const WORDS: [u32; 6] = [1, 2, 3, 4, 5, 6];
const WORDS_RANDOM: [f64; 4] = [
    0.6218049217551649,
    0.11940126789606353,
    0.8390479995608978,
    0.08230172215067955,
];

/// `math.log(256)`, the fixtures' lognormal mean.
fn lognormal_mean() -> f64 {
    256.0_f64.ln()
}

/// Asserts `got` and `want` are the same doubles, bit for bit.
fn assert_bits(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}[{i}]: got {g:?}, numpy {w:?}"
        );
    }
}

/// The first `n` draws of `draw` from a fresh `Generator::from_seed(seed)`.
fn first(seed: u64, n: usize, mut draw: impl FnMut(&mut Generator) -> f64) -> Vec<f64> {
    let mut rng = Generator::from_seed(seed);
    (0..n).map(|_| draw(&mut rng)).collect()
}

/// The fixtures' checksum of `values`, as the script computes it on `.view(np.uint64)`.
fn digest(values: &[f64]) -> Digest {
    let bits = values.iter().map(|value| value.to_bits());
    Digest {
        xor: bits.clone().fold(0, |acc, b| acc ^ b),
        sum: bits.fold(0, u64::wrapping_add),
    }
}

/// Checks a million draws of `draw` from `default_rng(7)` against `run`.
fn check_long_run(run: &LongRun, tail: f64, draw: impl FnMut(&mut Generator) -> f64) {
    let values = first(7, LONG_RUN, draw);
    for &(i, want) in &run.at {
        assert_bits(&values[i..=i], &[want], &format!("draw {i}"));
    }
    let beyond = values.iter().filter(|value| value.abs() > tail).count();
    assert_eq!(beyond, run.beyond_tail, "draws beyond the tail start");
    assert_eq!(digest(&values), run.digest);
}

#[test]
fn random_matches_numpy_for_each_seed() {
    for case in &CASES {
        let got = first(case.seed, 8, Generator::random);
        assert_bits(&got, &case.random, &format!("random, seed {}", case.seed));
    }
}

#[test]
fn standard_normal_matches_numpy_for_each_seed() {
    for case in &CASES {
        let got = first(case.seed, 8, Generator::standard_normal);
        let what = format!("standard_normal, seed {}", case.seed);
        assert_bits(&got, &case.standard_normal, &what);
    }
}

#[test]
fn standard_exponential_matches_numpy_for_each_seed() {
    for case in &CASES {
        let got = first(case.seed, 8, Generator::standard_exponential);
        let what = format!("standard_exponential, seed {}", case.seed);
        assert_bits(&got, &case.standard_exponential, &what);
    }
}

#[test]
fn lognormal_matches_numpy_for_each_seed() {
    for case in &CASES {
        let got = first(case.seed, 8, |rng| {
            rng.lognormal(lognormal_mean(), LOGNORMAL_SIGMA)
        });
        let what = format!("lognormal, seed {}", case.seed);
        assert_bits(&got, &case.lognormal, &what);
    }
}

#[test]
fn seeds_are_not_truncated_to_32_bits() {
    // 2**32 is the words [0, 1]; cut to its low 32 bits it would seed as 0 does.
    let zero = first(0, 8, Generator::random);
    let two_32 = first(1 << 32, 8, Generator::random);
    assert_ne!(zero, two_32);
}

#[test]
fn a_million_standard_normals_match_numpy() {
    check_long_run(
        &STANDARD_NORMAL_RUN,
        NORMAL_TAIL,
        Generator::standard_normal,
    );
}

#[test]
fn a_million_standard_exponentials_match_numpy() {
    check_long_run(
        &STANDARD_EXPONENTIAL_RUN,
        EXPONENTIAL_TAIL,
        Generator::standard_exponential,
    );
}

#[test]
fn interleaved_draws_share_one_stream() {
    let mut rng = Generator::from_seed(2024);
    let mut values = Vec::with_capacity(400_000);
    for _ in 0..100_000 {
        values.push(rng.random());
        values.push(rng.standard_normal());
        values.push(rng.standard_exponential());
        values.push(rng.lognormal(lognormal_mean(), LOGNORMAL_SIGMA));
    }
    assert_bits(&values[..12], &INTERLEAVED_HEAD, "interleaved");
    assert_eq!(digest(&values), INTERLEAVED_DIGEST);
}

#[test]
fn seed_lists_match_numpy() {
    for (seeds, want) in &SEED_LISTS {
        let mut rng = Generator::from_seeds(seeds);
        let got: Vec<f64> = (0..4).map(|_| rng.random()).collect();
        assert_bits(&got, want, &format!("default_rng({seeds:?})"));
    }
}

#[test]
fn entropy_longer_than_the_pool_matches_numpy() {
    let mut rng = Generator::from_entropy_words(&WORDS);
    let got: Vec<f64> = (0..4).map(|_| rng.random()).collect();
    assert_bits(
        &got,
        &WORDS_RANDOM,
        "default_rng(np.array(WORDS, np.uint32))",
    );
}
