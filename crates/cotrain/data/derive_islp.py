#!/usr/bin/env python3
"""Derive the shipped bikeshare.csv and wage.csv from the ISLP 0.6.0 wheel (Python stdlib only).

    pip download ISLP==0.6.0 --no-deps -d /tmp/islp
    python3 derive_islp.py /tmp/islp/islp-0.6.0-py3-none-any.whl

Writes both files next to this script; their sha256 are in README.md. Every transformation is
here: categorical columns become their ordinal codes, the counts a log.
"""
import csv
import io
import math
import os
import sys
import zipfile

MONTHS = ["Jan", "Feb", "March", "April", "May", "June", "July", "Aug", "Sept", "Oct", "Nov", "Dec"]
WEATHER = ["clear", "cloudy/misty", "light rain/snow", "heavy rain/snow"]


def rows(zf, name):
    return list(csv.DictReader(io.TextIOWrapper(zf.open(name), encoding="utf-8")))


def code(v):
    # ISLP's ordered factors are written "1. < HS Grad", "2. HS Grad", …: keep the number.
    return int(v.split(".", 1)[0])


def write(path, header, out):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(out)


def main(wheel):
    here = os.path.dirname(os.path.abspath(__file__))
    zf = zipfile.ZipFile(wheel)
    bike = rows(zf, "ISLP/data/Bikeshare.csv")
    write(
        os.path.join(here, "bikeshare.csv"),
        ["hr", "workingday", "weekday", "mnth", "weathersit", "temp", "hum", "windspeed", "log_bikers"],
        [
            [
                int(r["hr"]),
                int(r["workingday"]),
                int(r["weekday"]),
                MONTHS.index(r["mnth"]) + 1,
                WEATHER.index(r["weathersit"]) + 1,
                r["temp"],
                r["hum"],
                r["windspeed"],
                repr(math.log1p(float(r["bikers"]))),
            ]
            for r in bike
        ],
    )
    wage = rows(zf, "ISLP/data/Wage.csv")
    write(
        os.path.join(here, "wage.csv"),
        ["year", "age", "maritl", "race", "education", "jobclass", "health", "health_ins", "logwage"],
        [
            [
                int(r["year"]),
                int(r["age"]),
                code(r["maritl"]),
                code(r["race"]),
                code(r["education"]),
                code(r["jobclass"]),
                code(r["health"]),
                code(r["health_ins"]),
                r["logwage"],
            ]
            for r in wage
        ],
    )


if __name__ == "__main__":
    main(sys.argv[1])
