"""A few realistic SQLite databases built in code, with questions whose gold is what their SQL returns.

Rows come from a fixed-seed generator over realistic name pools, so every build is byte-identical and
the gold (computed by executing the SQL) never drifts. Real Spider/LOFT databases can be read instead
(see `spider.loader`).
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from typing import Callable

FIRST = (
    "Ava Liam Noah Emma Olivia Mason Sophia Lucas Mia Ethan Isabella Logan Amelia Jacob Harper Elijah Evelyn "
    "Aiden Abigail James Emily Benjamin Ella Henry Chloe Owen Grace Daniel Zoe Samuel Nora Leo Lily Mateo Hannah"
).split()
LAST = (
    "Smith Johnson Brown Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez Wilson Anderson Thomas "
    "Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark Ramirez Lewis Robinson Walker Young"
).split()


@dataclass(frozen=True)
class Question:
    question: str
    sql: str


@dataclass(frozen=True)
class BuiltinDatabase:
    db_id: str
    build: Callable[[sqlite3.Connection], None]
    questions: tuple[Question, ...]


def _people(rng: random.Random, n: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in names:
            names.append(name)
    return names


def _university(con: sqlite3.Connection) -> None:
    rng = random.Random(2018)
    con.executescript("""
        CREATE TABLE department (dept_name TEXT PRIMARY KEY, building TEXT, budget REAL);
        CREATE TABLE classroom (building TEXT, room_number TEXT, capacity INTEGER, PRIMARY KEY (building, room_number));
        CREATE TABLE instructor (id INTEGER PRIMARY KEY, name TEXT, dept_name TEXT REFERENCES department, salary REAL);
        CREATE TABLE course (course_id TEXT PRIMARY KEY, title TEXT, dept_name TEXT REFERENCES department, credits INTEGER);
        CREATE TABLE student (id INTEGER PRIMARY KEY, name TEXT, dept_name TEXT REFERENCES department, tot_cred INTEGER);
        CREATE TABLE takes (student_id INTEGER REFERENCES student, course_id TEXT REFERENCES course,
                            semester TEXT, year INTEGER, grade TEXT);
    """)
    buildings = [
        "Garfield",
        "Gates",
        "Lambeau",
        "Nassau",
        "Painter",
        "Rathbone",
        "Saucon",
        "Stabler",
        "Taylor",
        "Whitman",
        "Lamberton",
    ]
    depts = {
        "Biology": "Whitman",
        "Comp. Sci.": "Taylor",
        "Elec. Eng.": "Taylor",
        "Finance": "Painter",
        "History": "Painter",
        "Music": "Lamberton",
        "Physics": "Gates",
        "Statistics": "Saucon",
        "Mathematics": "Stabler",
        "Languages": "Nassau",
    }
    con.executemany(
        "INSERT INTO department VALUES (?,?,?)",
        [(d, b, float(rng.randrange(50, 130) * 1000)) for d, b in depts.items()],
    )
    rooms = []
    for b in buildings:
        for _ in range(rng.randint(2, 4)):
            rooms.append((b, str(rng.randrange(100, 400)), rng.choice([10, 15, 20, 30, 40, 50, 60, 75, 90, 120, 150])))
    con.executemany("INSERT OR IGNORE INTO classroom VALUES (?,?,?)", rooms)
    dnames = list(depts)
    con.executemany(
        "INSERT INTO instructor VALUES (?,?,?,?)",
        [
            (10000 + i, n, rng.choice(dnames), float(rng.randrange(40, 130) * 1000))
            for i, n in enumerate(_people(rng, 45))
        ],
    )
    topics = {
        "Biology": ["Genetics", "Cell Biology", "Ecology", "Microbiology"],
        "Comp. Sci.": ["Databases", "Algorithms", "Operating Systems", "Machine Learning", "Compilers"],
        "Elec. Eng.": ["Circuits", "Signals", "Control Systems"],
        "Finance": ["Investments", "Corporate Finance"],
        "History": ["World History", "Medieval Europe", "American History"],
        "Music": ["Music Theory", "Composition"],
        "Physics": ["Mechanics", "Quantum Physics", "Optics"],
        "Statistics": ["Probability", "Regression"],
        "Mathematics": ["Calculus", "Linear Algebra", "Topology"],
        "Languages": ["Spanish", "Japanese", "Latin"],
    }
    courses = []
    for d, titles in topics.items():
        for k, t in enumerate(titles):
            courses.append((f"{d[:3].upper().replace('.', '')}-{101 + 100 * k}", t, d, rng.choice([3, 3, 4, 4, 2])))
    con.executemany("INSERT INTO course VALUES (?,?,?,?)", courses)
    students = [(20000 + i, n, rng.choice(dnames), rng.randrange(0, 130)) for i, n in enumerate(_people(rng, 420))]
    con.executemany("INSERT INTO student VALUES (?,?,?,?)", students)
    takes = set()
    for sid, *_ in students:
        for c in rng.sample(courses, rng.randint(1, 4)):
            takes.add(
                (
                    sid,
                    c[0],
                    rng.choice(["Fall", "Spring"]),
                    rng.choice([2021, 2022, 2023]),
                    rng.choice(["A", "A-", "B+", "B", "B-", "C", "F"]),
                )
            )
    con.executemany("INSERT INTO takes VALUES (?,?,?,?,?)", sorted(takes))


def _concerts(con: sqlite3.Connection) -> None:
    rng = random.Random(2024)
    con.executescript("""
        CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT, location TEXT, capacity INTEGER, average_attendance INTEGER);
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, genre TEXT, age INTEGER, is_male TEXT);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, theme TEXT, stadium_id INTEGER REFERENCES stadium, year INTEGER);
        CREATE TABLE singer_in_concert (concert_id INTEGER REFERENCES concert, singer_id INTEGER REFERENCES singer);
    """)
    places = [
        ("Raith Rovers", "Kirkcaldy"),
        ("Ayr United", "Ayr"),
        ("Balmoor", "Peterhead"),
        ("Glebe Park", "Brechin"),
        ("Somerset Park", "Ayr"),
        ("Hampden Park", "Glasgow"),
        ("Forthbank", "Stirling"),
        ("Gayfield", "Arbroath"),
    ]
    stadiums = []
    for i, (n, loc) in enumerate(places, 1):
        cap = rng.randrange(2000, 52000, 500)
        stadiums.append((i, n, loc, cap, int(cap * rng.uniform(0.2, 0.9))))
    con.executemany("INSERT INTO stadium VALUES (?,?,?,?,?)", stadiums)
    countries = ["France", "Netherlands", "United States", "Japan", "Brazil", "Nigeria", "Canada"]
    genres = ["Pop", "Rock", "Jazz", "Folk", "Hip hop", "Classical"]
    singers = [
        (i, n, rng.choice(countries), rng.choice(genres), rng.randint(19, 62), rng.choice(["T", "F"]))
        for i, n in enumerate(_people(rng, 150), 1)
    ]
    con.executemany("INSERT INTO singer VALUES (?,?,?,?,?,?)", singers)
    themes = ["Free choice", "Party All Night", "Happy Tonight", "Wide Awake", "Bleeding Love", "Summer Lights"]
    concerts = [
        (
            i,
            f"{rng.choice(['Auditions', 'Super bootcamp', 'Home Visits', 'Week 1', 'Week 2', 'Finals'])} {i}",
            rng.choice(themes),
            rng.randint(1, len(places)),
            rng.choice([2014, 2015, 2016]),
        )
        for i in range(1, 91)
    ]
    con.executemany("INSERT INTO concert VALUES (?,?,?,?,?)", concerts)
    pairs = sorted({(c[0], rng.randint(1, len(singers))) for c in concerts for _ in range(rng.randint(1, 5))})
    con.executemany("INSERT INTO singer_in_concert VALUES (?,?)", pairs)


def _shop(con: sqlite3.Connection) -> None:
    rng = random.Random(1999)
    con.executescript("""
        CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, city TEXT, signup_year INTEGER);
        CREATE TABLE products (product_id INTEGER PRIMARY KEY, product_name TEXT, category TEXT, price REAL);
        CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers, order_date TEXT, status TEXT);
        CREATE TABLE order_items (order_id INTEGER REFERENCES orders, product_id INTEGER REFERENCES products, quantity INTEGER);
    """)
    cities = ["Chicago", "Denver", "Austin", "Seattle", "Boston", "Miami", "Portland"]
    con.executemany(
        "INSERT INTO customers VALUES (?,?,?,?)",
        [(i, n, rng.choice(cities), rng.randint(2015, 2023)) for i, n in enumerate(_people(rng, 240), 1)],
    )
    catalog = {
        "Kitchen": ["Chef Knife", "Cast Iron Skillet", "Cutting Board", "Espresso Maker", "Spice Rack"],
        "Outdoor": ["Camping Tent", "Trail Backpack", "Sleeping Bag", "Headlamp"],
        "Office": ["Desk Lamp", "Ergonomic Chair", "Notebook Set", "Monitor Stand", "Fountain Pen"],
        "Garden": ["Pruning Shears", "Watering Can", "Raised Bed Kit"],
    }
    products = [
        (i, n, c, round(rng.uniform(5, 300), 2))
        for i, (c, n) in enumerate(((c, n) for c, ns in catalog.items() for n in ns), 1)
    ]
    con.executemany("INSERT INTO products VALUES (?,?,?,?)", products)
    orders = [
        (
            i,
            rng.randint(1, 240),
            f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            rng.choice(["shipped", "shipped", "delivered", "delivered", "cancelled", "pending"]),
        )
        for i in range(1, 701)
    ]
    con.executemany("INSERT INTO orders VALUES (?,?,?,?)", orders)
    items = sorted(
        {(o[0], rng.randint(1, len(products)), rng.randint(1, 4)) for o in orders for _ in range(rng.randint(1, 3))}
    )
    con.executemany("INSERT INTO order_items VALUES (?,?,?)", items)


BUILTIN: tuple[BuiltinDatabase, ...] = (
    BuiltinDatabase(
        "university",
        _university,
        (
            Question(
                "Find the buildings which have rooms with capacity more than 50.",
                "SELECT DISTINCT building FROM classroom WHERE capacity > 50 ORDER BY building",
            ),
            Question(
                "Count the number of rooms that are not in the Lamberton building.",
                "SELECT count(*) FROM classroom WHERE building != 'Lamberton'",
            ),
            Question(
                "What is the name and building of the department with the largest budget?",
                "SELECT dept_name, building FROM department ORDER BY budget DESC LIMIT 1",
            ),
            Question(
                "How many students are in the Comp. Sci. department?",
                "SELECT count(*) FROM student WHERE dept_name = 'Comp. Sci.'",
            ),
            Question(
                "List the titles of courses offered by the Physics department.",
                "SELECT title FROM course WHERE dept_name = 'Physics' ORDER BY title",
            ),
            Question(
                "Which instructors earn more than 120000? Give their names.",
                "SELECT name FROM instructor WHERE salary > 120000 ORDER BY name",
            ),
            Question(
                "What is the average salary of instructors in each department? Give department and average.",
                "SELECT dept_name, round(avg(salary), 2) FROM instructor GROUP BY dept_name ORDER BY dept_name",
            ),
            Question(
                "How many students received an F in any course in 2022?",
                "SELECT count(DISTINCT student_id) FROM takes WHERE grade = 'F' AND year = 2022",
            ),
            Question(
                "Which course title was taken by the most students?",
                "SELECT c.title FROM takes t JOIN course c ON t.course_id = c.course_id GROUP BY c.course_id ORDER "
                "BY count(*) DESC, c.title LIMIT 1",
            ),
            Question(
                "What is the total budget of all departments located in the Taylor building?",
                "SELECT sum(budget) FROM department WHERE building = 'Taylor'",
            ),
            Question(
                "How many classrooms have a capacity between 30 and 75?",
                "SELECT count(*) FROM classroom WHERE capacity BETWEEN 30 AND 75",
            ),
            Question(
                "Which building has the largest total room capacity?",
                "SELECT building FROM classroom GROUP BY building ORDER BY sum(capacity) DESC, building LIMIT 1",
            ),
            Question(
                "List the names of students in the History department with more than 100 total credits.",
                "SELECT name FROM student WHERE dept_name = 'History' AND tot_cred > 100 ORDER BY name",
            ),
            Question("How many courses are worth 4 credits?", "SELECT count(*) FROM course WHERE credits = 4"),
            Question(
                "Which department has the most instructors?",
                "SELECT dept_name FROM instructor GROUP BY dept_name ORDER BY count(*) DESC, dept_name LIMIT 1",
            ),
            Question(
                "Who is the lowest-paid instructor, and in which department do they work?",
                "SELECT name, dept_name FROM instructor ORDER BY salary ASC, name LIMIT 1",
            ),
            Question(
                "How many enrolments were recorded in the Fall 2023 semester?",
                "SELECT count(*) FROM takes WHERE semester = 'Fall' AND year = 2023",
            ),
        ),
    ),
    BuiltinDatabase(
        "concerts",
        _concerts,
        (
            Question("How many singers do we have?", "SELECT count(*) FROM singer"),
            Question(
                "What are the names of stadiums located in Ayr?",
                "SELECT name FROM stadium WHERE location = 'Ayr' ORDER BY name",
            ),
            Question(
                "Show the stadium name and capacity of the stadium with the highest average attendance.",
                "SELECT name, capacity FROM stadium ORDER BY average_attendance DESC LIMIT 1",
            ),
            Question("How many concerts took place in 2015?", "SELECT count(*) FROM concert WHERE year = 2015"),
            Question(
                "List each country and the number of singers from it.",
                "SELECT country, count(*) FROM singer GROUP BY country ORDER BY country",
            ),
            Question(
                "What is the average age of singers from France?",
                "SELECT round(avg(age), 2) FROM singer WHERE country = 'France'",
            ),
            Question(
                "Which stadium hosted the most concerts? Give its name.",
                "SELECT s.name FROM concert c JOIN stadium s ON c.stadium_id = s.stadium_id GROUP BY s.stadium_id "
                "ORDER BY count(*) DESC, s.name LIMIT 1",
            ),
            Question(
                "Which singers performed in a concert with the theme 'Happy Tonight'?",
                "SELECT DISTINCT sg.name FROM singer_in_concert sc JOIN concert c ON sc.concert_id = c.concert_id "
                "JOIN singer sg ON sc.singer_id = sg.singer_id WHERE c.theme = 'Happy Tonight' ORDER BY sg.name",
            ),
            Question("What is the maximum capacity of any stadium?", "SELECT max(capacity) FROM stadium"),
            Question("How many singers are older than 40?", "SELECT count(*) FROM singer WHERE age > 40"),
            Question(
                "List the names of Jazz singers, youngest first.",
                "SELECT name FROM singer WHERE genre = 'Jazz' ORDER BY age, name",
            ),
            Question(
                "Which genre has the most singers?",
                "SELECT genre FROM singer GROUP BY genre ORDER BY count(*) DESC, genre LIMIT 1",
            ),
            Question(
                "How many concerts were held at Hampden Park?",
                "SELECT count(*) FROM concert c JOIN stadium s ON c.stadium_id = s.stadium_id WHERE s.name = "
                "'Hampden Park'",
            ),
            Question(
                "What is the name of the oldest singer and their country?",
                "SELECT name, country FROM singer ORDER BY age DESC, name LIMIT 1",
            ),
            Question(
                "How many distinct singers performed in concerts in 2016?",
                "SELECT count(DISTINCT sc.singer_id) FROM singer_in_concert sc JOIN concert c ON sc.concert_id = "
                "c.concert_id WHERE c.year = 2016",
            ),
            Question(
                "List the themes used for concerts, each once.", "SELECT DISTINCT theme FROM concert ORDER BY theme"
            ),
            Question(
                "Which stadiums hosted at least 12 concerts?",
                "SELECT s.name FROM stadium s JOIN concert c ON s.stadium_id = c.stadium_id "
                "GROUP BY s.stadium_id HAVING count(*) >= 12 ORDER BY s.name",
            ),
        ),
    ),
    BuiltinDatabase(
        "shop",
        _shop,
        (
            Question("How many customers live in Denver?", "SELECT count(*) FROM customers WHERE city = 'Denver'"),
            Question(
                "What is the most expensive product? Give its name and price.",
                "SELECT product_name, price FROM products ORDER BY price DESC LIMIT 1",
            ),
            Question("How many orders were cancelled?", "SELECT count(*) FROM orders WHERE status = 'cancelled'"),
            Question(
                "List the product categories with the number of products in each.",
                "SELECT category, count(*) FROM products GROUP BY category ORDER BY category",
            ),
            Question(
                "What is the total quantity of Camping Tents ordered?",
                "SELECT sum(oi.quantity) FROM order_items oi JOIN products p ON oi.product_id = p.product_id WHERE "
                "p.product_name = 'Camping Tent'",
            ),
            Question(
                "Which customer placed the most orders? Give the name.",
                "SELECT c.name FROM orders o JOIN customers c ON o.customer_id = c.customer_id GROUP BY "
                "c.customer_id ORDER BY count(*) DESC, c.name LIMIT 1",
            ),
            Question(
                "Which cities have customers who signed up before 2017?",
                "SELECT DISTINCT city FROM customers WHERE signup_year < 2017 ORDER BY city",
            ),
            Question(
                "How many orders were placed in December 2023?",
                "SELECT count(*) FROM orders WHERE order_date LIKE '2023-12-%'",
            ),
            Question(
                "What is the average price of Office products?",
                "SELECT round(avg(price), 2) FROM products WHERE category = 'Office'",
            ),
            Question(
                "List the products that cost less than 50, cheapest first.",
                "SELECT product_name FROM products WHERE price < 50 ORDER BY price, product_name",
            ),
            Question(
                "How many distinct customers have placed at least one order?",
                "SELECT count(DISTINCT customer_id) FROM orders",
            ),
            Question(
                "Which city has the most customers?",
                "SELECT city FROM customers GROUP BY city ORDER BY count(*) DESC, city LIMIT 1",
            ),
            Question("How many orders are still pending?", "SELECT count(*) FROM orders WHERE status = 'pending'"),
            Question(
                "What is the total number of items (sum of quantities) in all delivered orders?",
                "SELECT sum(oi.quantity) FROM order_items oi JOIN orders o ON oi.order_id = o.order_id WHERE "
                "o.status = 'delivered'",
            ),
            Question(
                "Which product was ordered in the largest total quantity?",
                "SELECT p.product_name FROM order_items oi JOIN products p ON oi.product_id = p.product_id "
                "GROUP BY p.product_id ORDER BY sum(oi.quantity) DESC, p.product_name LIMIT 1",
            ),
            Question(
                "How many customers signed up in 2020?", "SELECT count(*) FROM customers WHERE signup_year = 2020"
            ),
        ),
    ),
)


def build(db: BuiltinDatabase) -> sqlite3.Connection:
    """An in-memory connection holding the built database."""
    con = sqlite3.connect(":memory:")
    db.build(con)
    con.commit()
    return con
