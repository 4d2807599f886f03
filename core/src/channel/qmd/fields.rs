//! The QMD layouts as NVIDIA's headers declare them (open-gpu-doc `classes/compute/*qmd.h`,
//! commit c8607fe): each field is written `NAME: hi:lo` for the header's
//! `NVxxxx_QMDVxx_xx_NAME MW(hi:lo)`, an indexed one `NAME(i < n): (hi(i)):(lo(i))` for
//! `NAME(i) MW((hi(i)):(lo(i)))` with its `n` instances. [`qmd_layout!`] turns each layout into
//! a module of typed fields and its name table, checked by the compiler.

use super::QmdField;

/// Declares a QMD layout as a module: one `pub const` [`QmdField`] per field (an array for an
/// indexed one) and `FIELDS`, the name table sorted by bit, expanded (`NAME(0)`, `NAME(1)`,
/// ...) for the decoder. The compiler rejects a field past the layout's end, one straddling
/// two 32-bit words (the typed setters write one word), `hi < lo`, and overlapping fields.
macro_rules! qmd_layout {
    (
        $(#[$meta:meta])*
        $vis:vis mod $module:ident: $words:literal words {
            $( $name:ident $( ($i:ident < $n:tt) )? : $hi:tt : $lo:tt ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[allow(unused_parens, clippy::identity_op, clippy::erasing_op, clippy::precedence)]
        $vis mod $module {
            use super::QmdField;

            /// Size of the layout in 32-bit words.
            pub const WORDS: usize = $words;

            $( qmd_layout!(@field $name $( ($i < $n) )? : $hi : $lo); )*

            const GROUPS: &[&[QmdField]] = &[ $( qmd_layout!(@group $name $( ($i < $n) )?) ),* ];
            const COUNT: usize = super::count(GROUPS);

            /// Every field, sorted by bit position, indexed ones expanded: the name table the
            /// decoder reads.
            pub static FIELDS: [QmdField; COUNT] = super::table::<COUNT>(GROUPS, WORDS);
        }
    };
    (@field $name:ident : $hi:tt : $lo:tt) => {
        #[doc = concat!("`", stringify!($name), "`: `MW(", stringify!($hi), ":", stringify!($lo), ")`.")]
        pub const $name: QmdField = QmdField::new(stringify!($name), $hi, $lo);
    };
    (@field $name:ident ($i:ident < 2) : $hi:tt : $lo:tt) => {
        qmd_layout!(@indexed $name $i [0 1] $hi $lo);
    };
    (@field $name:ident ($i:ident < 3) : $hi:tt : $lo:tt) => {
        qmd_layout!(@indexed $name $i [0 1 2] $hi $lo);
    };
    (@field $name:ident ($i:ident < 8) : $hi:tt : $lo:tt) => {
        qmd_layout!(@indexed $name $i [0 1 2 3 4 5 6 7] $hi $lo);
    };
    (@field $name:ident ($i:ident < 18) : $hi:tt : $lo:tt) => {
        qmd_layout!(@indexed $name $i [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17] $hi $lo);
    };
    (@indexed $name:ident $i:ident [$($k:literal)*] $hi:tt $lo:tt) => {
        #[doc = concat!(
            "`", stringify!($name), "(", stringify!($i), ")`: `MW(", stringify!($hi), ":",
            stringify!($lo), ")`, by index."
        )]
        pub const $name: [QmdField; [$($k),*].len()] = [$(
            QmdField::new(
                concat!(stringify!($name), "(", $k, ")"),
                { let $i: u16 = $k; $hi },
                { let $i: u16 = $k; $lo },
            )
        ),*];
    };
    (@group $name:ident) => { &[$name] };
    (@group $name:ident ($i:ident < $n:tt)) => { &$name };
}

/// Fields in all groups.
const fn count(groups: &[&[QmdField]]) -> usize {
    let mut n = 0;
    let mut g = 0;
    while g < groups.len() {
        n += groups[g].len();
        g += 1;
    }
    n
}

/// The groups' fields in one table sorted by `lo`, each checked; a failed check stops the
/// build with the field's name.
const fn table<const N: usize>(groups: &[&[QmdField]], words: usize) -> [QmdField; N] {
    let mut out = [QmdField::new("", 0, 0); N];
    let mut n = 0;
    let mut g = 0;
    while g < groups.len() {
        let mut k = 0;
        while k < groups[g].len() {
            let f = groups[g][k];
            // hi below lo.
            assert!(f.hi >= f.lo, "{}", f.name);
            // Past the end of the layout.
            assert!((f.hi as usize) < 32 * words, "{}", f.name);
            // Straddles two 32-bit words.
            assert!(f.hi / 32 == f.lo / 32, "{}", f.name);
            // Insertion by lo.
            let mut j = n;
            while j > 0 && out[j - 1].lo > f.lo {
                out[j] = out[j - 1];
                j -= 1;
            }
            out[j] = f;
            n += 1;
            k += 1;
        }
        g += 1;
    }
    let mut j = 1;
    while j < N {
        // Overlaps the field before it.
        assert!(out[j].lo > out[j - 1].hi, "{}", out[j].name);
        j += 1;
    }
    out
}

qmd_layout! {
    /// QMD V03_00 (Ampere, Ada), from `clc9c0qmd.h` (ADA_COMPUTE_A).
    pub mod v03_00: 64 words {
        OUTER_PUT: 30:0,
        OUTER_OVERFLOW: 31:31,
        OUTER_GET: 62:32,
        OUTER_STICKY_OVERFLOW: 63:63,
        INNER_GET: 94:64,
        INNER_OVERFLOW: 95:95,
        INNER_PUT: 126:96,
        INNER_STICKY_OVERFLOW: 127:127,
        QMD_GROUP_ID: 133:128,
        SM_GLOBAL_CACHING_ENABLE: 134:134,
        RUN_CTA_IN_ONE_SM_PARTITION: 135:135,
        IS_QUEUE: 136:136,
        ADD_TO_HEAD_OF_QMD_GROUP_LINKED_LIST: 137:137,
        REQUIRE_SCHEDULING_PCAS: 140:140,
        DEPENDENCE_COUNTER: 157:142,
        SELF_COPY_ON_COMPLETION: 158:158,
        CIRCULAR_QUEUE_SIZE: 184:160,
        DEMOTE_L2_EVICT_LAST: 185:185,
        INVALIDATE_TEXTURE_HEADER_CACHE: 186:186,
        INVALIDATE_TEXTURE_SAMPLER_CACHE: 187:187,
        INVALIDATE_TEXTURE_DATA_CACHE: 188:188,
        INVALIDATE_SHADER_DATA_CACHE: 189:189,
        INVALIDATE_INSTRUCTION_CACHE: 190:190,
        INVALIDATE_SHADER_CONSTANT_CACHE: 191:191,
        CTA_RASTER_WIDTH_RESUME: 223:192,
        CTA_RASTER_HEIGHT_RESUME: 239:224,
        CTA_RASTER_DEPTH_RESUME: 255:240,
        PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED: 287:256,
        CIRCULAR_QUEUE_ADDR_LOWER: 319:288,
        CIRCULAR_QUEUE_ADDR_UPPER: 327:320,
        CIRCULAR_QUEUE_ENTRY_SIZE: 351:336,
        CWD_REFERENCE_COUNT_ID: 357:352,
        CWD_REFERENCE_COUNT_DELTA_MINUS_ONE: 365:358,
        CWD_REFERENCE_COUNT_INCR_ENABLE: 367:367,
        CWD_MEMBAR_TYPE: 369:368,
        SEQUENTIALLY_RUN_CTAS: 370:370,
        CWD_REFERENCE_COUNT_DECR_ENABLE: 371:371,
        SM_DISABLE_MASK_EXT_LOWER: 377:372,
        API_VISIBLE_CALL_LIMIT: 378:378,
        SM_DISABLE_MASK_EXT_UPPER: 380:379,
        SAMPLER_INDEX: 382:382,
        DISABLE_AUTO_INVALIDATE: 383:383,
        CTA_RASTER_WIDTH: 415:384,
        CTA_RASTER_HEIGHT: 431:416,
        CTA_RASTER_DEPTH: 463:448,
        DEPENDENT_QMD0_POINTER: 511:480,
        DEPENDENT_QMD0_ENABLE: 512:512,
        DEPENDENT_QMD0_ACTION: 515:513,
        DEPENDENT_QMD0_PREFETCH: 516:516,
        DEPENDENT_QMD1_ENABLE: 517:517,
        DEPENDENT_QMD1_ACTION: 520:518,
        DEPENDENT_QMD1_PREFETCH: 521:521,
        COALESCE_WAITING_PERIOD: 529:522,
        QUEUE_ENTRIES_PER_CTA_LOG2: 534:530,
        OCCUPANCY_THRESHOLD_SHARED_MEM: 542:535,
        CTA_LAUNCH_QUEUE: 543:543,
        SHARED_MEMORY_SIZE: 561:544,
        MIN_SM_CONFIG_SHARED_MEM_SIZE: 567:562,
        MAX_SM_CONFIG_SHARED_MEM_SIZE: 574:569,
        QMD_VERSION: 579:576,
        QMD_MAJOR_VERSION: 583:580,
        OCCUPANCY_MAX_SHARED_MEM: 591:584,
        CTA_THREAD_DIMENSION0: 607:592,
        CTA_THREAD_DIMENSION1: 623:608,
        CTA_THREAD_DIMENSION2: 639:624,
        CONSTANT_BUFFER_VALID(i < 8): (640+(i)*1):(640+(i)*1),
        REGISTER_COUNT_V: 656:648,
        TARGET_SM_CONFIG_SHARED_MEM_SIZE: 662:657,
        SHARED_ALLOCATION_ENABLE: 663:663,
        FREE_CTA_SLOTS_EMPTY_SM: 671:664,
        SM_DISABLE_MASK_LOWER: 703:672,
        SM_DISABLE_MASK_UPPER: 735:704,
        SHADER_LOCAL_MEMORY_LOW_SIZE: 759:736,
        BARRIER_COUNT: 767:763,
        RELEASE0_ADDRESS_LOWER: 799:768,
        RELEASE0_ADDRESS_UPPER: 807:800,
        RELEASE0_MEMBAR_TYPE: 819:819,
        RELEASE0_REDUCTION_OP: 822:820,
        RELEASE0_ENABLE: 823:823,
        RELEASE0_REDUCTION_FORMAT: 825:824,
        RELEASE0_REDUCTION_ENABLE: 826:826,
        RELEASE0_TRAP_TYPE: 828:827,
        RELEASE0_PAYLOAD64B: 829:829,
        RELEASE0_STRUCTURE_SIZE: 831:830,
        RELEASE0_PAYLOAD_LOWER: 863:832,
        RELEASE0_PAYLOAD_UPPER: 895:864,
        RELEASE1_ADDRESS_LOWER: 927:896,
        RELEASE1_ADDRESS_UPPER: 935:928,
        RELEASE1_MEMBAR_TYPE: 947:947,
        RELEASE1_REDUCTION_OP: 950:948,
        RELEASE1_ENABLE: 951:951,
        RELEASE1_REDUCTION_FORMAT: 953:952,
        RELEASE1_REDUCTION_ENABLE: 954:954,
        RELEASE1_TRAP_TYPE: 956:955,
        RELEASE1_PAYLOAD64B: 957:957,
        RELEASE1_STRUCTURE_SIZE: 959:958,
        RELEASE1_PAYLOAD_LOWER: 991:960,
        RELEASE1_PAYLOAD_UPPER: 1023:992,
        CONSTANT_BUFFER_ADDR_LOWER(i < 8): (1055+(i)*64):(1024+(i)*64),
        CONSTANT_BUFFER_ADDR_UPPER(i < 8): (1072+(i)*64):(1056+(i)*64),
        CONSTANT_BUFFER_PREFETCH_POST(i < 8): (1073+(i)*64):(1073+(i)*64),
        CONSTANT_BUFFER_INVALIDATE(i < 8): (1074+(i)*64):(1074+(i)*64),
        CONSTANT_BUFFER_SIZE_SHIFTED4(i < 8): (1087+(i)*64):(1075+(i)*64),
        PROGRAM_ADDRESS_LOWER: 1567:1536,
        PROGRAM_ADDRESS_UPPER: 1584:1568,
        SHADER_LOCAL_MEMORY_HIGH_SIZE: 1623:1600,
        PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED: 1640:1632,
        PROGRAM_PREFETCH_SIZE: 1649:1641,
        PROGRAM_PREFETCH_TYPE: 1651:1650,
        SASS_VERSION: 1663:1656,
        RELEASE2_ADDRESS_LOWER: 1695:1664,
        RELEASE2_ADDRESS_UPPER: 1703:1696,
        RELEASE2_MEMBAR_TYPE: 1715:1715,
        RELEASE2_REDUCTION_OP: 1718:1716,
        RELEASE2_ENABLE: 1719:1719,
        RELEASE2_REDUCTION_FORMAT: 1721:1720,
        RELEASE2_REDUCTION_ENABLE: 1722:1722,
        RELEASE2_TRAP_TYPE: 1724:1723,
        RELEASE2_PAYLOAD64B: 1725:1725,
        RELEASE2_STRUCTURE_SIZE: 1727:1726,
        RELEASE2_PAYLOAD_LOWER: 1759:1728,
        RELEASE2_PAYLOAD_UPPER: 1791:1760,
        OCCUPANCY_THRESHOLD_WARP: 1799:1792,
        OCCUPANCY_MAX_WARP: 1807:1800,
        OCCUPANCY_THRESHOLD_REGISTER: 1815:1808,
        OCCUPANCY_MAX_REGISTER: 1823:1816,
        HW_ONLY_INNER_GET: 1854:1824,
        HW_ONLY_REQUIRE_SCHEDULING_PCAS: 1855:1855,
        HW_ONLY_INNER_PUT: 1886:1856,
        HW_ONLY_SPAN_LIST_HEAD_INDEX: 1917:1888,
        HW_ONLY_SPAN_LIST_HEAD_INDEX_VALID: 1919:1919,
        HW_ONLY_SKED_NEXT_QMD_POINTER: 1951:1920,
        HW_ONLY_DEPENDENCE_COUNTER: 1967:1952,
        DEBUG_ID_UPPER: 2015:1984,
        DEBUG_ID_LOWER: 2047:2016,
    }
}

qmd_layout! {
    /// QMD V04_00 (Hopper), from `clcbc0qmd.h` (HOPPER_COMPUTE_A).
    pub mod v04_00: 96 words {
        DEPENDENCE_COUNTER: 15:0,
        QMD_GROUP_ID: 21:16,
        ADD_TO_HEAD_OF_QMD_GROUP_LINKED_LIST: 22:22,
        QMD_TYPE: 25:23,
        ARRIVE_AT_LATCH_VALID: 28:28,
        WAIT_ON_LATCH_VALID: 29:29,
        REQUIRE_SCHEDULING_PCAS: 30:30,
        TPC_DISABLE_MASK_VALID: 31:31,
        CIRCULAR_QUEUE_SIZE: 56:32,
        INNER_GET: 94:64,
        INNER_OVERFLOW: 95:95,
        INNER_PUT: 126:96,
        INNER_STICKY_OVERFLOW: 127:127,
        HW_ONLY_INNER_GET: 190:160,
        HW_ONLY_INNER_PUT: 222:192,
        HW_ONLY_SPAN_LIST_HEAD_INDEX: 253:224,
        HW_ONLY_SPAN_LIST_HEAD_INDEX_VALID: 254:254,
        HW_ONLY_SKED_NEXT_QMD_POINTER: 287:256,
        HW_ONLY_DEPENDENCE_COUNTER: 303:288,
        HW_ONLY_REQUIRE_SCHEDULING_PCAS: 304:304,
        RELEASE_ENABLE(i < 3): (320+(i)*16):(320+(i)*16),
        RELEASE_STRUCTURE_SIZE(i < 3): (322+(i)*16):(321+(i)*16),
        RELEASE_MEMBAR_TYPE(i < 3): (323+(i)*16):(323+(i)*16),
        RELEASE_REDUCTION_ENABLE(i < 3): (324+(i)*16):(324+(i)*16),
        RELEASE_REDUCTION_OP(i < 3): (327+(i)*16):(325+(i)*16),
        RELEASE_REDUCTION_FORMAT(i < 3): (329+(i)*16):(328+(i)*16),
        RELEASE_TRAP_TYPE(i < 3): (331+(i)*16):(330+(i)*16),
        RELEASE_PAYLOAD64B(i < 3): (332+(i)*16):(332+(i)*16),
        RELEASE_RESERVED_INFO(i < 3): (335+(i)*16):(333+(i)*16),
        DEPENDENT_QMD_ENABLE(i < 2): (368+(i)*5):(368+(i)*5),
        DEPENDENT_QMD_ACTION(i < 2): (371+(i)*5):(369+(i)*5),
        DEPENDENT_QMD_PREFETCH(i < 2): (372+(i)*5):(372+(i)*5),
        SELF_COPY_ON_COMPLETION: 378:378,
        DEMOTE_L2_EVICT_LAST: 379:379,
        DISABLE_AUTO_INVALIDATE: 380:380,
        CORRELATION_ID_INTERNAL: 381:381,
        CWD_MEMBAR_TASK_CHASING_ENABLE: 382:382,
        CORRELATION_ID: 415:384,
        CONSTANT_BUFFER_VALID(i < 8): (416+(i)*4):(416+(i)*4),
        CONSTANT_BUFFER_PREFETCH(i < 8): (418+(i)*4):(417+(i)*4),
        CONSTANT_BUFFER_INVALIDATE(i < 8): (419+(i)*4):(419+(i)*4),
        DEPENDENT_QMD0_POINTER: 479:448,
        DEPENDENT_QMD1_POINTER: 511:480,
        SHADER_LOCAL_MEMORY_LOW_SIZE: 535:512,
        SASS_VERSION: 543:536,
        SHADER_LOCAL_MEMORY_HIGH_SIZE: 567:544,
        API_VISIBLE_CALL_LIMIT: 568:568,
        SAMPLER_INDEX: 569:569,
        CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8: 575:570,
        QMD_MINOR_VERSION: 579:576,
        QMD_MAJOR_VERSION: 583:580,
        SHARED_MEMORY_SIZE: 601:584,
        INVALIDATE_TEXTURE_HEADER_CACHE: 602:602,
        INVALIDATE_TEXTURE_SAMPLER_CACHE: 603:603,
        INVALIDATE_TEXTURE_DATA_CACHE: 604:604,
        INVALIDATE_SHADER_DATA_CACHE: 605:605,
        INVALIDATE_INSTRUCTION_CACHE: 606:606,
        INVALIDATE_SHADER_CONSTANT_CACHE: 607:607,
        MIN_SM_CONFIG_SHARED_MEM_SIZE: 613:608,
        MAX_SM_CONFIG_SHARED_MEM_SIZE: 619:614,
        TARGET_SM_CONFIG_SHARED_MEM_SIZE: 625:620,
        SHARED_ALLOCATION_ENABLE: 626:626,
        RELEASE_SEMAPHORE0_ADDR_LOWER: 671:640,
        RELEASE_SEMAPHORE0_ADDR_UPPER: 696:672,
        RELEASE_SEMAPHORE0_PAYLOAD_LOWER: 735:704,
        RELEASE_SEMAPHORE0_PAYLOAD_UPPER: 767:736,
        RELEASE_SEMAPHORE1_ADDR_LOWER: 799:768,
        RELEASE_SEMAPHORE1_ADDR_UPPER: 824:800,
        RELEASE_SEMAPHORE1_PAYLOAD_LOWER: 863:832,
        RELEASE_SEMAPHORE1_PAYLOAD_UPPER: 895:864,
        RELEASE_SEMAPHORE2_ADDR_LOWER: 927:896,
        RELEASE_SEMAPHORE2_ADDR_UPPER: 952:928,
        RELEASE_SEMAPHORE2_PAYLOAD_LOWER: 991:960,
        RELEASE_SEMAPHORE2_PAYLOAD_UPPER: 1023:992,
        GRID_WIDTH: 1055:1024,
        GRID_HEIGHT: 1071:1056,
        GRID_DEPTH: 1103:1088,
        CWD_REFERENCE_COUNT_DELTA_MINUS_ONE: 1127:1120,
        CWD_REFERENCE_COUNT_ID: 1133:1128,
        CWD_REFERENCE_COUNT_INCR_ENABLE: 1134:1134,
        CWD_REFERENCE_COUNT_DECR_ENABLE: 1135:1135,
        CWD_MEMBAR_TYPE: 1137:1136,
        SEQUENTIALLY_RUN_CTAS: 1138:1138,
        CTA_LAUNCH_QUEUE: 1139:1139,
        FREE_CTA_SLOTS_EMPTY_SM: 1147:1140,
        SYNC_DOMAIN_ID: 1149:1148,
        PRE_EXIT_AT_LAST_CTA_LAUNCH: 1150:1150,
        ENABLE_PROGRAM_PRE_EXIT: 1151:1151,
        CTA_THREAD_DIMENSION0: 1167:1152,
        CTA_THREAD_DIMENSION1: 1183:1168,
        CTA_THREAD_DIMENSION2: 1199:1184,
        REGISTER_COUNT: 1208:1200,
        BARRIER_COUNT: 1215:1211,
        PROGRAM_ADDRESS_LOWER: 1247:1216,
        PROGRAM_ADDRESS_UPPER: 1272:1248,
        OCCUPANCY_THRESHOLD_WARP: 1287:1280,
        OCCUPANCY_MAX_WARP: 1295:1288,
        OCCUPANCY_THRESHOLD_REGISTER: 1303:1296,
        OCCUPANCY_MAX_REGISTER: 1311:1304,
        OCCUPANCY_THRESHOLD_SHARED_MEM: 1319:1312,
        OCCUPANCY_MAX_SHARED_MEM: 1327:1320,
        PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED: 1375:1344,
        PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED: 1392:1376,
        PROGRAM_PREFETCH_SIZE: 1401:1393,
        PROGRAM_PREFETCH_TYPE: 1403:1402,
        LATCH_ACQUIRE_INVALIDATE_SHADER_DATA_CACHE: 1406:1406,
        LATCH_ACQUIRE_INVALIDATE_TEXTURE_DATA_CACHE: 1407:1407,
        GRID_WIDTH_RESUME: 1439:1408,
        GRID_HEIGHT_RESUME: 1455:1440,
        GRID_DEPTH_RESUME: 1471:1456,
        ARRIVE_AT_LATCH_ID: 1503:1472,
        WAIT_ON_LATCH_ID: 1535:1504,
        CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(i < 8): (1567+(i)*64):(1536+(i)*64),
        CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(i < 8): (1586+(i)*64):(1568+(i)*64),
        CONSTANT_BUFFER_SIZE_SHIFTED4(i < 8): (1599+(i)*64):(1587+(i)*64),
        CIRCULAR_QUEUE_ADDR_LOWER: 2079:2048,
        CIRCULAR_QUEUE_ADDR_UPPER: 2087:2080,
        CIRCULAR_QUEUE_ENTRY_SIZE: 2127:2112,
        COALESCE_WAITING_PERIOD: 2135:2128,
        QUEUE_ENTRIES_PER_CTA_LOG2: 2140:2136,
        GPC_CGA_WIDTH: 2149:2144,
        GPC_CGA_HEIGHT: 2157:2152,
        GPC_CGA_DEPTH: 2165:2160,
        CGA_CTA_DISTRIBUTION_MODE: 2207:2207,
        GPU_CGA_WIDTH: 2223:2208,
        GPU_CGA_HEIGHT: 2239:2224,
        GPU_CGA_DEPTH: 2255:2240,
        DEBUG_ID_LOWER: 2399:2368,
        DEBUG_ID_UPPER: 2431:2400,
        TPC_DISABLE_MASK(i < 18): (2463+(i)*32):(2432+(i)*32),
        OUTER_PUT: 3038:3008,
        OUTER_OVERFLOW: 3039:3039,
        OUTER_GET: 3070:3040,
        OUTER_STICKY_OVERFLOW: 3071:3071,
    }
}

qmd_layout! {
    /// QMD V05_00 (Blackwell), from `clcec0qmd.h` (BLACKWELL_COMPUTE_B; identical in
    /// `clcdc0qmd.h`).
    pub mod v05_00: 96 words {
        HW_ONLY_SPAN_LIST_HEAD_INDEX: 29:0,
        HW_ONLY_SPAN_LIST_HEAD_INDEX_VALID: 30:30,
        HW_ONLY_REQUIRE_SCHEDULING_PCAS: 31:31,
        HW_ONLY_SKED_NEXT_QMD_POINTER: 63:32,
        INNER_GET: 94:64,
        INNER_OVERFLOW: 95:95,
        INNER_PUT: 126:96,
        INNER_STICKY_OVERFLOW: 127:127,
        DEPENDENCE_COUNTER: 143:128,
        QMD_GROUP_ID: 149:144,
        ADD_TO_HEAD_OF_QMD_GROUP_LINKED_LIST: 150:150,
        QMD_TYPE: 153:151,
        NUM_SUB_TASKS_PER_TASK: 157:154,
        REQUIRE_SCHEDULING_PCAS: 158:158,
        TPC_DISABLE_MASK_VALID: 159:159,
        CIRCULAR_QUEUE_SIZE: 184:160,
        HW_ONLY_DEPENDENCE_COUNTER: 207:192,
        RESUME_SUB_TASK_ID: 210:208,
        COMPLETED_SUB_TASK_MASK: 218:211,
        GRID_WIDTH_RESUME: 255:224,
        GRID_HEIGHT_RESUME: 271:256,
        GRID_DEPTH_RESUME: 287:272,
        RELEASE_ENABLE(i < 3): (288+(i)*16):(288+(i)*16),
        RELEASE_STRUCTURE_SIZE(i < 3): (290+(i)*16):(289+(i)*16),
        RELEASE_MEMBAR_TYPE(i < 3): (291+(i)*16):(291+(i)*16),
        RELEASE_REDUCTION_ENABLE(i < 3): (292+(i)*16):(292+(i)*16),
        RELEASE_REDUCTION_OP(i < 3): (295+(i)*16):(293+(i)*16),
        RELEASE_REDUCTION_FORMAT(i < 3): (297+(i)*16):(296+(i)*16),
        RELEASE_TRAP_TYPE(i < 3): (299+(i)*16):(298+(i)*16),
        RELEASE_PAYLOAD64B(i < 3): (300+(i)*16):(300+(i)*16),
        RELEASE_RESERVED_INFO(i < 3): (303+(i)*16):(301+(i)*16),
        DEPENDENT_QMD0_ENABLE: 336:336,
        DEPENDENT_QMD0_ACTION: 339:337,
        DEPENDENT_QMD0_PREFETCH: 340:340,
        SELF_COPY_ON_COMPLETION: 341:341,
        DEMOTE_L2_EVICT_LAST: 342:342,
        DISABLE_AUTO_INVALIDATE: 343:343,
        DEPENDENT_QMD1_ENABLE: 344:344,
        DEPENDENT_QMD1_ACTION: 347:345,
        DEPENDENT_QMD1_PREFETCH: 348:348,
        CORRELATION_ID_INTERNAL: 349:349,
        CWD_MEMBAR_TASK_CHASING_ENABLE: 350:350,
        SHARED_ALLOCATION_ENABLE: 351:351,
        CORRELATION_ID: 383:352,
        DEPENDENT_QMD0_POINTER: 415:384,
        DEPENDENT_QMD1_POINTER: 447:416,
        SASS_VERSION: 455:448,
        API_VISIBLE_CALL_LIMIT: 456:456,
        SAMPLER_INDEX: 457:457,
        CONSTANT_BANK_PREFETCH_PRE_MAX_SIZE_SHIFTED8: 463:458,
        QMD_MINOR_VERSION: 467:464,
        QMD_MAJOR_VERSION: 471:468,
        INVALIDATE_TEXTURE_HEADER_CACHE: 472:472,
        INVALIDATE_TEXTURE_SAMPLER_CACHE: 473:473,
        INVALIDATE_TEXTURE_DATA_CACHE: 474:474,
        INVALIDATE_SHADER_DATA_CACHE: 475:475,
        INVALIDATE_INSTRUCTION_CACHE: 476:476,
        INVALIDATE_SHADER_CONSTANT_CACHE: 477:477,
        LATCH_ACQUIRE_INVALIDATE_SHADER_DATA_CACHE: 478:478,
        LATCH_ACQUIRE_INVALIDATE_TEXTURE_DATA_CACHE: 479:479,
        RELEASE_SEMAPHORE0_ADDR_LOWER: 511:480,
        RELEASE_SEMAPHORE0_ADDR_UPPER: 536:512,
        RELEASE_SEMAPHORE0_PAYLOAD_LOWER: 575:544,
        RELEASE_SEMAPHORE0_PAYLOAD_UPPER: 607:576,
        CWD_REFERENCE_COUNT_DELTA_MINUS_ONE: 615:608,
        CWD_REFERENCE_COUNT_ID: 621:616,
        CWD_REFERENCE_COUNT_INCR_ENABLE: 622:622,
        CWD_REFERENCE_COUNT_DECR_ENABLE: 623:623,
        CWD_MEMBAR_TYPE: 625:624,
        LATCH_ACQUIRE_INVALIDATE_CONSTANT_CACHE: 626:626,
        CTA_LAUNCH_QUEUE: 627:627,
        FREE_CTA_SLOTS_EMPTY_SM: 635:628,
        SYNC_DOMAIN_ID: 637:636,
        PRE_EXIT_AT_LAST_CTA_LAUNCH: 638:638,
        ENABLE_PROGRAM_PRE_EXIT: 639:639,
        ARRIVE_AT_LATCH_ID: 671:640,
        WAIT_ON_LATCH_ID: 703:672,
        OCCUPANCY_THRESHOLD_SHARED_MEM: 721:714,
        OCCUPANCY_MAX_SHARED_MEM: 729:722,
        ARRIVE_AT_LATCH_VALID: 730:730,
        WAIT_ON_LATCH_VALID: 731:731,
        LATCH_RELEASE_INVALIDATE_ENABLE: 732:732,
        HOLD_CTA_LAUNCH_UNTIL_PARENT_LATCH_ACQUIRE_AND_CTA_COMPLETE: 733:733,
        HOLD_MEMBAR_UNTIL_LATCH_ACQUIRE: 734:734,
        PRIORITY_DEMOTE_UNTIL_LATCH_ACQUIRE: 735:735,
        OCCUPANCY_THRESHOLD_WARP: 743:736,
        OCCUPANCY_MAX_WARP: 751:744,
        OCCUPANCY_THRESHOLD_REGISTER: 759:752,
        OCCUPANCY_MAX_REGISTER: 767:760,
        RELEASE_SEMAPHORE1_ADDR_LOWER: 799:768,
        RELEASE_SEMAPHORE1_ADDR_UPPER: 824:800,
        RELEASE_SEMAPHORE1_PAYLOAD_LOWER: 863:832,
        RELEASE_SEMAPHORE1_PAYLOAD_UPPER: 895:864,
        RELEASE_SEMAPHORE2_ADDR_LOWER: 927:896,
        RELEASE_SEMAPHORE2_ADDR_UPPER: 952:928,
        RELEASE_SEMAPHORE2_PAYLOAD_LOWER: 991:960,
        RELEASE_SEMAPHORE2_PAYLOAD_UPPER: 1023:992,
        PROGRAM_ADDRESS_LOWER_SHIFTED4: 1055:1024,
        PROGRAM_ADDRESS_UPPER_SHIFTED4: 1076:1056,
        PROGRAM_PREFETCH_SIZE: 1085:1077,
        PROGRAM_PREFETCH_TYPE: 1087:1086,
        CTA_THREAD_DIMENSION0: 1103:1088,
        CTA_THREAD_DIMENSION1: 1119:1104,
        CTA_THREAD_DIMENSION2: 1127:1120,
        REGISTER_COUNT: 1136:1128,
        BARRIER_COUNT: 1141:1137,
        ICC_PREFETCH_SIZE: 1147:1142,
        SHARED_MEMORY_SIZE_SHIFTED7: 1162:1152,
        MIN_SM_CONFIG_SHARED_MEM_SIZE: 1168:1163,
        MAX_SM_CONFIG_SHARED_MEM_SIZE: 1174:1169,
        TARGET_SM_CONFIG_SHARED_MEM_SIZE: 1180:1175,
        SHARED_MEM_BARRIER_INIT_ENABLE: 1181:1181,
        SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4: 1199:1184,
        SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4: 1215:1200,
        VIRTUAL_RESOURCE_COUNT: 1223:1216,
        GRID_WIDTH: 1279:1248,
        GRID_HEIGHT: 1295:1280,
        GRID_DEPTH: 1327:1312,
        CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(i < 8): (1375+(i)*64):(1344+(i)*64),
        CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(i < 8): (1394+(i)*64):(1376+(i)*64),
        CONSTANT_BUFFER_SIZE_SHIFTED4(i < 8): (1407+(i)*64):(1395+(i)*64),
        CONSTANT_BUFFER_VALID(i < 8): (1856+(i)*4):(1856+(i)*4),
        CONSTANT_BUFFER_PREFETCH(i < 8): (1858+(i)*4):(1857+(i)*4),
        CONSTANT_BUFFER_INVALIDATE(i < 8): (1859+(i)*4):(1859+(i)*4),
        PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED: 1919:1888,
        PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED: 1936:1920,
        GPC_CGA_WIDTH: 2053:2048,
        GPC_CGA_HEIGHT: 2061:2056,
        GPC_CGA_DEPTH: 2069:2064,
        LARGE_GPC_CGA_WIDTH_MINUS_ONE: 2075:2072,
        LARGE_GPC_CGA_HEIGHT_MINUS_ONE: 2079:2076,
        CGA_CTA_DISTRIBUTION_MODE: 2111:2111,
        GPU_CGA_WIDTH: 2127:2112,
        GPU_CGA_HEIGHT: 2143:2128,
        GPU_CGA_DEPTH: 2159:2144,
        DEBUG_ID_LOWER: 2207:2176,
        DEBUG_ID_UPPER: 2239:2208,
        TPC_DISABLE_MASK(i < 8): (2271+(i)*32):(2240+(i)*32),
        INCOMPLETE_BOX_BASE_WIDTH_RESUME: 2527:2496,
        INCOMPLETE_BOX_BASE_HEIGHT_RESUME: 2543:2528,
        INCOMPLETE_BOX_BASE_DEPTH_RESUME: 2559:2544,
        INCOMPLETE_BOX_OFFSET_WIDTH_RESUME: 2563:2560,
        INCOMPLETE_BOX_OFFSET_HEIGHT_RESUME: 2567:2564,
        QUEUE_ENTRIES_PER_CTA_LOG2: 2596:2592,
        HW_ONLY_INNER_GET: 2654:2624,
        HW_ONLY_INNER_PUT: 2686:2656,
        OUTER_PUT: 3038:3008,
        OUTER_OVERFLOW: 3039:3039,
        OUTER_GET: 3070:3040,
        OUTER_STICKY_OVERFLOW: 3071:3071,
    }
}
