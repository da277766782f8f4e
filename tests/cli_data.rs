//! `dpcotrain data ids` and `data view`: a party's own table (text ids, its covariates, labels
//! on some rows) becomes the three files its node reads, in the agreed entity order, and a node
//! checks them; bad input is one line naming the file, row, column or id.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpcotrain"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A party's table: 120 entities named "e0".."e119", two covariates and a label (absent on
/// entity `blank`, if given).
fn table(dir: &Path, blank: Option<usize>) -> std::path::PathBuf {
    let mut s = String::from("entity,age,income,spend\n");
    for i in 0..120 {
        let (x1, x2) = (i as f64 / 10.0, ((i * 37) % 17) as f64);
        let y = if Some(i) == blank { String::new() } else { format!("{}", (x1 / 3.0).sin() + 0.1 * x2) };
        s.push_str(&format!("e{i},{x1},{x2},{y}\n"));
    }
    let p = dir.join("mine.csv");
    std::fs::write(&p, s).unwrap();
    p
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap().lines().map(String::from).collect()
}

#[test]
fn a_partys_table_becomes_its_nodes_files_in_the_agreed_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = table(dir.path(), None);
    let ids = dir.path().join("ids");
    let draw = |out: &Path| {
        bin()
            .args(["data", "ids", "--input"])
            .arg(&input)
            .args(["--id", "entity", "--pool", "30", "--test", "20", "--seed", "5", "--out"])
            .arg(out)
            .output()
            .unwrap()
    };
    let o = draw(&ids);
    assert!(o.status.success(), "{}", text(&o));
    let pool = lines(&ids.join("pool-ids.csv"));
    let test = lines(&ids.join("test-ids.csv"));
    assert_eq!((pool[0].as_str(), pool.len(), test.len()), ("entity", 31, 21));
    // Seeded: the same draw again; a second draw into the same folder needs --force.
    let again = dir.path().join("again");
    assert!(draw(&again).status.success());
    assert_eq!(lines(&again.join("pool-ids.csv")), pool);
    assert!(text(&draw(&ids)).contains("--force"));
    // The party has no label for one entity outside the test set (a test entity needs its
    // label): it is left out of train.csv, and counted.
    let blank = (0..120).find(|k| !test.contains(&format!("e{k}")) && !pool.contains(&format!("e{k}"))).unwrap();
    table(dir.path(), Some(blank));

    let out = dir.path().join("view");
    let view = |extra: &[&str]| {
        bin()
            .args(["data", "view", "--input"])
            .arg(&input)
            .args(["--id", "entity", "--target", "spend", "--pool-ids"])
            .arg(ids.join("pool-ids.csv"))
            .arg("--test-ids")
            .arg(ids.join("test-ids.csv"))
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = view(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let train = lines(&out.join("train.csv"));
    let pool_x = lines(&out.join("pool.csv"));
    let test_x = lines(&out.join("test.csv"));
    assert_eq!(train[0], "age,income,spend");
    assert_eq!(pool_x[0], "age,income", "the pool carries no label");
    assert_eq!(test_x[0], "age,income,spend");
    // The files with labels are readable by their owner only.
    #[cfg(unix)]
    for f in ["train.csv", "test.csv"] {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(out.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
    }
    assert_eq!(train.len() - 1, 120 - 50 - 1, "{}", text(&o));
    assert!(text(&o).contains("1 rows without a label left out"), "{}", text(&o));
    // Row j of pool.csv is the j-th pool id's covariates: entity eK has age K/10.
    for (j, id) in pool.iter().skip(1).enumerate() {
        let k: f64 = id[1..].parse().unwrap();
        let age: f64 = pool_x[j + 1].split(',').next().unwrap().parse().unwrap();
        assert_eq!(age, k / 10.0, "pool row {j} is {id}");
    }
    // A node reads them: a party config pointing at the files passes `node check`.
    let cfg = dir.path().join("party.toml");
    std::fs::write(
        &cfg,
        "name = \"A\"\nfederation_id = \"t\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\nseed = 1\nstate_dir = \"state\"\n\
         [data]\ntrain = \"view/train.csv\"\npool = \"view/pool.csv\"\ntest = \"view/test.csv\"\ntarget = \"spend\"\n\
         [[peers]]\nname = \"B\"\naddress = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let o = bin().args(["node", "check", "--config"]).arg(&cfg).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["labels"]["rows"], 69, "the node read train.csv's labelled rows: {v}");
    // Covariates chosen and ordered by --columns.
    let o = view(&["--columns", "income", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(lines(&out.join("pool.csv"))[0], "income");
}

#[test]
fn bad_tables_and_id_lists_are_refused_naming_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let input = table(dir.path(), None);
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let pool = write("pool.csv", "entity\ne1\ne2\n");
    let test = write("test.csv", "entity\ne3\n");
    let view = |input: &Path, pool: &Path, test: &Path, out: &str| {
        let o = bin()
            .args(["data", "view", "--input"])
            .arg(input)
            .args(["--id", "entity", "--target", "spend", "--pool-ids"])
            .arg(pool)
            .arg("--test-ids")
            .arg(test)
            .arg("--out")
            .arg(dir.path().join(out))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        text(&o)
    };
    let unknown = write("unknown.csv", "entity\ne1\nnobody\n");
    assert!(view(&input, &unknown, &test, "a").contains("id \"nobody\" (listed in"));
    let twice = write("twice.csv", "entity\ne1\ne1\n");
    assert!(view(&input, &twice, &test, "b").contains("line 3: id \"e1\" is listed twice"));
    let both = write("both.csv", "entity\ne3\n");
    assert!(view(&input, &both, &test, "c").contains("id \"e3\" is in both"));
    let bad = write("bad.csv", "entity,age,income,spend\ne1,1,2,3\ne2,x,2,3\ne3,1,2,3\ne4,1,2,3\n");
    let e = view(&bad, &pool, &test, "d");
    assert!(e.contains("line 3, column \"age\": \"x\" is not a finite number"), "{e}");
    // Lines as the file numbers them, a blank line included.
    let blank = write("blank.csv", "entity,age,income,spend\ne1,1,2,3\n\ne2,1,y,3\ne3,1,2,3\ne4,1,2,3\n");
    let e = view(&blank, &pool, &test, "g");
    assert!(e.contains("line 4, column \"income\""), "{e}");
    let dup = write("dup.csv", "entity,age,income,spend\ne1,1,2,3\ne1,1,2,3\n");
    assert!(view(&dup, &pool, &test, "e").contains("id \"e1\" on lines 2 and 3"));
    let no_test_label = write("nolabel.csv", "entity,age,income,spend\ne1,1,2,3\ne2,1,2,3\ne3,1,2,\ne4,1,2,3\n");
    let e = view(&no_test_label, &pool, &test, "f");
    assert!(e.contains("line 4: entity \"e3\" has no label in \"spend\""), "{e}");
    // Nothing was written by a refused view.
    for out in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(!dir.path().join(out).join("train.csv").exists());
    }
    let o = bin()
        .args(["data", "ids", "--input"])
        .arg(&input)
        .args(["--id", "nope", "--pool", "3", "--test", "3", "--out"])
        .arg(dir.path().join("ids"))
        .output()
        .unwrap();
    assert!(text(&o).contains("no column \"nope\""), "{}", text(&o));
    // Sizes that overflow are refused, not a panic.
    let o = bin()
        .args(["data", "ids", "--input"])
        .arg(&input)
        .args(["--id", "entity", "--pool", &u64::MAX.to_string(), "--test", "2", "--out"])
        .arg(dir.path().join("ids"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("must each be at least 1 and leave labelled rows"), "{}", text(&o));
}
