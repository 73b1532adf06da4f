BEGIN TRANSACTION;
CREATE TABLE cells (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  cell_key TEXT NOT NULL,
  finished_at TEXT NOT NULL,
  status TEXT NOT NULL,
  "device" TEXT,
  "precision" TEXT,
  "batch_size" INTEGER,
  "threads" INTEGER,
  "tokens" INTEGER,
  "engine" TEXT,
  "compile" INTEGER,
  "stream" INTEGER,
  "reason" TEXT,
  "latency_p50_s" REAL,
  "latency_p90_s" REAL,
  "latency_std_s" REAL,
  "latency_mean_s" REAL,
  "repeats" INTEGER,
  "rtf" REAL,
  "audio_s_per_s" REAL,
  "tokens_per_s" REAL,
  "step_ms" REAL,
  "ttfa_s" REAL,
  "peak_rss_mb" REAL,
  "peak_device_mb" REAL,
  "load_s" REAL,
  "cold_s" REAL,
  "audio_s" REAL,
  "model" TEXT,
  "device_effective" TEXT,
  "dtype_gpt" TEXT,
  "threads_effective" INTEGER,
  "compile_effective" INTEGER,
  "elapsed_s" REAL,
  result_json TEXT NOT NULL,
  UNIQUE (sweep_id, cell_key)
);
INSERT INTO "cells" VALUES(1,1,0,'cpu|fp32|b1|t1|n16|stock|compile=0|stream=0','2026-11-29T17:44:17+00:00','ok','cpu','fp32',1,1,16,'stock',0,0,'',1.1,1.18,9.99999999999999777955e-02,1.1,3,3.32661290322580693867e+00,3.0060606060606059886e-01,1.454545454545454497e+01,66.0,NULL,500.0,NULL,0.5,3.0,3.30666666666666664298e-01,'synthetic-tiny','cpu','float32',1,NULL,0.0,'{"config": {"model": "synthetic-tiny", "device": "cpu", "precision": "fp32", "batch_size": 1, "threads": 1, "tokens": 16, "engine": "stock", "compile": false, "stream": false, "warmup": 1, "repeats": 3, "min_time_s": 1.0, "max_repeats": 100, "timeout_s": 1800.0, "text": "The quick brown fox jumps over the lazy dog, and then it takes a short rest."}, "status": "ok", "reason": "", "latency": {"count": 3, "mean": 1.1, "p50": 1.1, "p90": 1.18, "p95": 1.19, "p99": 1.198, "std": 0.09999999999999998, "min": 1.0, "max": 1.2}, "rtf": 3.326612903225807, "audio_s_per_s": 0.3006060606060606, "tokens_per_s": 14.545454545454545, "step_ms": 66.0, "ttfa_s": null, "peak_rss_mb": 500.0, "peak_device_mb": null, "load_s": 0.5, "cold_s": 3.0, "audio_s": 0.33066666666666666, "effective": {"threads": 1, "dtype_gpt": "float32", "device": "cpu"}, "extra": {}, "elapsed_s": 0.0}');
CREATE TABLE fidelity (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  device TEXT NOT NULL, engine TEXT NOT NULL, precision TEXT NOT NULL,
  status TEXT NOT NULL,
  record_json TEXT NOT NULL,
  UNIQUE (sweep_id, device, engine, precision)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','1');
CREATE TABLE samples (
  cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  wall_s REAL,
  data_json TEXT NOT NULL,
  PRIMARY KEY (cell_id, seq)
);
INSERT INTO "samples" VALUES(1,0,'cold',3.0,'{"phase": "cold", "wall_s": 3.0}');
INSERT INTO "samples" VALUES(1,1,'timed',1.0,'{"phase": "timed", "wall_s": 1.0, "decode_s": 0.9, "gpt_steps": 16, "audio_s": 0.33066666666666666, "peak_rss_mb": 500.0, "tokens": [16], "ttfa_s": null, "peak_device_mb": null}');
INSERT INTO "samples" VALUES(1,2,'timed',1.2,'{"phase": "timed", "wall_s": 1.2, "decode_s": 1.08, "gpt_steps": 16, "audio_s": 0.33066666666666666, "peak_rss_mb": 500.0, "tokens": [16], "ttfa_s": null, "peak_device_mb": null}');
INSERT INTO "samples" VALUES(1,3,'timed',1.1,'{"phase": "timed", "wall_s": 1.1, "decode_s": 0.9900000000000001, "gpt_steps": 16, "audio_s": 0.33066666666666666, "peak_rss_mb": 500.0, "tokens": [16], "ttfa_s": null, "peak_device_mb": null}');
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  uuid TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  status TEXT NOT NULL,
  origin TEXT NOT NULL DEFAULT 'local',
  host TEXT, pid INTEGER, pid_started REAL,
  machine TEXT,
  spec_json TEXT NOT NULL,
  env_json TEXT NOT NULL
);
INSERT INTO "sweeps" VALUES(1,'58d3a3c247d84e3aa243b5299c75e1df','2026-11-29T17:44:17+00:00','2026-11-29T17:44:17+00:00','interrupted','local','old-machine',NULL,NULL,'Old CPU x2, ? GB, no GPU, torch 2.14.1','{"model": "synthetic-tiny", "devices": ["cpu"], "precisions": ["fp32", "bf16"], "batches": [1], "threads": [1], "tokens": [128], "engines": ["stock"], "compiles": [false], "streams": [false], "warmup": 1, "repeats": 3, "min_time_s": 1.0, "max_repeats": 100, "timeout_s": 1800.0, "fidelity": true, "fidelity_tokens": 32, "text": "The quick brown fox jumps over the lazy dog, and then it takes a short rest."}','{"hostname": "old-machine", "cpu": {"model": "Old CPU", "usable_cores": 2}, "versions": {"torch": "2.14.1"}}');
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('sweeps',1);
INSERT INTO "sqlite_sequence" VALUES('cells',1);
COMMIT;
