"""Vocabulary of the synthetic SUMIE generator: categories, names, attributes, values and sentence templates.

Templates use {S}/{s} for the subject (capitalised / mid-sentence) and {v} for the value, which is
inserted verbatim so that every gold value literally appears in the sentence that states it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attribute:
    name: str
    values: tuple[str, ...]
    templates: tuple[str, ...]
    multi: bool = False  # may gain further values in later paragraphs


@dataclass(frozen=True)
class Category:
    name: str
    descriptor: str  # how later sentences refer to the entity ("the hotel")
    name_parts: tuple[tuple[str, ...], ...]  # one pool per word of the name
    attributes: tuple[Attribute, ...]


def _a(name: str, values: str, *templates: str, multi: bool = False) -> Attribute:
    return Attribute(name, tuple(v.strip() for v in values.split("|")), templates, multi)


PERSON = Category(
    "person",
    "{last}",
    (
        tuple(
            "Amara Bruno Celine Dmitri Elena Farid Greta Hugo Ingrid Jonas Keiko Lorenzo Mina Nikolai Olga Pablo "
            "Quinn Rosa Soren Talia Umberto Vera Wendell Ximena Yusuf Zora Anselm Beatrix Cyrus Delphine".split()
        ),
        tuple(
            "Okafor Lindqvist Moreau Petrov Santos Haddad Brandt Kowalski Tanaka Ferraro Novak Ibarra Castellano "
            "Achterberg Mbeki Rasmussen Delacroix Oyelaran Varga Whitcombe Esposito Halvorsen Quintero Drummond".split()
        ),
    ),
    (
        _a(
            "occupation",
            "marine biologist|civil engineer|jazz pianist|investigative journalist|pediatric surgeon|"
            "landscape architect|software developer|high school teacher",
            "{S} works as a {v}.",
            "By profession, {s} is a {v}.",
            "{S} has built a career as a {v}.",
        ),
        _a(
            "birthplace",
            "Lisbon|Nairobi|Montreal|Kraków|Osaka|Valparaíso|Tbilisi|Adelaide",
            "{S} was born in {v}.",
            "{S} grew up in {v}, the city of their birth.",
            "Born in {v}, {s} never lost the accent.",
        ),
        _a(
            "education",
            "the University of Edinburgh|Sorbonne University|Kyoto University|McGill University|"
            "the University of Cape Town|ETH Zurich",
            "{S} studied at {v}.",
            "{S} graduated from {v}.",
            "A degree from {v} opened doors for {s}.",
        ),
        _a(
            "employer",
            "Harborview Medical Center|Northwind Labs|the Daily Meridian|Atlas Engineering|Bluefin Institute",
            "{S} is employed by {v}.",
            "These days {s} works for {v}.",
            "{S} took a position at {v}.",
        ),
        _a(
            "award",
            "Golden Quill Prize|Order of Merit|National Science Medal|Beacon Award|Silver Compass Honor",
            "{S} received the {v}.",
            "The {v} went to {s} that year.",
            "{S} was honored with the {v}.",
            multi=True,
        ),
        _a(
            "hobby",
            "rock climbing|beekeeping|chess|watercolor painting|sailing|amateur astronomy",
            "In spare hours {s} enjoys {v}.",
            "{S} is passionate about {v}.",
            "Friends know {s} for a love of {v}.",
            multi=True,
        ),
        _a(
            "language",
            "Portuguese|Swahili|Japanese|Polish|Arabic|Finnish",
            "{S} speaks fluent {v}.",
            "{S} learned {v} as an adult.",
            "Colleagues were surprised to hear {s} speak {v}.",
            multi=True,
        ),
        _a(
            "residence",
            "Rotterdam|Vancouver|Porto|Wellington|Ljubljana",
            "{S} now lives in {v}.",
            "{S} settled in {v} some years ago.",
            "Home for {s} is now {v}.",
        ),
    ),
)

RESTAURANT = Category(
    "restaurant",
    "the restaurant",
    (
        ("The",),
        tuple("Copper Velvet Saffron Juniper Crimson Amber Silver Wild Olive Cobalt Marigold Ivory".split()),
        tuple("Lantern Fig Anchor Orchard Sparrow Hearth Ladle Compass Lotus Thistle Meadow Kettle".split()),
        tuple("Bistro Kitchen Tavern Brasserie Trattoria Eatery".split()),
    ),
    (
        _a(
            "cuisine",
            "Peruvian|Basque|Vietnamese|Sicilian|Ethiopian|Lebanese|Oaxacan",
            "{S} serves {v} food.",
            "{S} specializes in {v} cooking.",
            "The menu at {s} is firmly {v}.",
        ),
        _a(
            "location",
            "Harbor Street|the old market square|Elm Avenue|the riverside promenade|Station Road",
            "{S} is located on {v}.",
            "You can find {s} on {v}.",
            "{S} occupies a corner of {v}.",
        ),
        _a(
            "head chef",
            "Chef Ana Ruiz|Chef Tomasz Wolski|Chef Lea Fontaine|Chef Kwame Asante|Chef Ines Duarte",
            "The kitchen of {s} is led by {v}.",
            "{S} hired {v} to run the kitchen.",
            "{v} is the head chef at {s}.",
        ),
        _a(
            "signature dish",
            "smoked octopus|lamb tagine|duck confit|saffron risotto|charred leeks|cardamom flan",
            "Diners rave about the {v} at {s}.",
            "{S} is best known for its {v}.",
            "The {v} has become a signature of {s}.",
            multi=True,
        ),
        _a(
            "price range",
            "moderately priced|expensive|budget friendly",
            "{S} is {v}.",
            "Most reviewers describe {s} as {v}.",
        ),
        _a(
            "opening hours",
            "from 5 pm to midnight|from noon to 10 pm|from 7 am to 3 pm",
            "{S} is open {v}.",
            "Guests can visit {s} {v}.",
        ),
        _a(
            "award",
            "Michelin star|Green Plate award|Best New Restaurant title|Golden Fork award",
            "{S} earned a {v}.",
            "Last year {s} won a {v}.",
            multi=True,
        ),
        _a(
            "seating capacity",
            "40 seats|65 seats|120 seats|28 seats",
            "{S} has {v}.",
            "The dining room at {s} offers {v}.",
        ),
    ),
)

COMPANY = Category(
    "company",
    "the company",
    (
        tuple(
            "Veltrix Norvana Quorix Helion Tessaro Brightwell Kestrel Orinoco Zephyra Lumen Caldera Ardent "
            "Corvid Maribel Stellan Obsidia Pyrenta Halcyon".split()
        ),
        tuple("Systems Dynamics Biotech Logistics Robotics Energy Analytics Foods".split()),
        tuple("Group Holdings Partners Labs Industries Networks".split()),
    ),
    (
        _a(
            "industry",
            "renewable energy|medical devices|freight logistics|cloud software|agricultural technology",
            "{S} operates in {v}.",
            "{S} is a player in {v}.",
            "Analysts classify {s} as a {v} business.",
        ),
        _a(
            "headquarters",
            "Rotterdam|Austin|Singapore|Bangalore|Copenhagen|São Paulo",
            "{S} is headquartered in {v}.",
            "The head office of {s} is in {v}.",
            "{S} runs its operations from {v}.",
        ),
        _a(
            "founder",
            "Priya Raman|Marcus Feld|Ayo Adeyemi|Hanne Solberg|Diego Morales",
            "{S} was founded by {v}.",
            "{v} co-founded {s}.",
            "{v} is credited as a founder of {s}.",
            multi=True,
        ),
        _a("founded year", "1998|2004|2011|2016|2019", "{S} was established in {v}.", "{S} has existed since {v}."),
        _a(
            "CEO",
            "Laura Chen|Tobias Wirth|Nadia Farouk|Samuel Oduya",
            "{S} is led by CEO {v}.",
            "{v} serves as chief executive of {s}.",
        ),
        _a(
            "product",
            "solar inverters|cold-chain trackers|infusion pumps|crop drones|fleet dashboards|battery packs",
            "{S} sells {v}.",
            "Among the products of {s} are {v}.",
            "{S} recently launched {v}.",
            multi=True,
        ),
        _a(
            "employees",
            "about 300 employees|roughly 1,200 employees|nearly 5,000 employees|fewer than 80 employees",
            "{S} has {v}.",
            "{S} employs {v}.",
        ),
        _a(
            "partner",
            "Siemens|Maersk|the Red Cross|Toyota|the World Bank",
            "{S} signed a partnership with {v}.",
            "{S} works closely with {v}.",
            multi=True,
        ),
    ),
)

HOTEL = Category(
    "hotel",
    "the hotel",
    (
        tuple(
            "Grand Royal Alpine Coral Harbor Regent Lakeside Summit Palm Cedar Ivory Sapphire Willow Granite Beacon "
            "Sunset".split()
        ),
        tuple("Meridian Crescent Belvedere Horizon Solstice Vista Majestic Aurora".split()),
        ("Hotel", "Resort", "Inn", "Lodge"),
    ),
    (
        _a(
            "location",
            "the old town|the bay area|the city center|the mountain valley|the airport district",
            "{S} sits in {v}.",
            "{S} is located in {v}.",
            "Guests find {s} in {v}.",
        ),
        _a("star rating", "three stars|four stars|five stars", "{S} is rated {v}.", "{S} holds a rating of {v}."),
        _a("rooms", "42 rooms|118 rooms|260 rooms|75 rooms", "{S} offers {v}.", "{S} has {v} in total."),
        _a(
            "amenity",
            "rooftop pool|spa|fitness center|free shuttle|library lounge|ski storage",
            "{S} features a {v}.",
            "Guests at {s} can use the {v}.",
            "A {v} was added to {s}.",
            multi=True,
        ),
        _a(
            "nearby attraction",
            "the national museum|the botanical garden|the cathedral|the lighthouse|the night market",
            "{S} is a short walk from {v}.",
            "Visitors to {s} often head to {v}.",
            multi=True,
        ),
        _a("check-in time", "2 pm|3 pm|4 pm", "Check-in at {s} begins at {v}.", "{S} starts check-in at {v}."),
        _a(
            "owner",
            "Marlowe Hospitality|Sunvale Group|Orbis Hotels|the Lindgren family",
            "{S} is owned by {v}.",
            "{v} bought {s}.",
        ),
    ),
)

PRODUCT = Category(
    "product",
    "the device",
    (
        tuple("Lumio Vortek Pixora Sonique Trevo Nimbus Kairo Axion Zenko Orbi".split()),
        tuple("Pulse Edge Aura Flex Nova Prime Echo Drift".split()),
        tuple("3 5 7 9 X S Pro Air".split()),
    ),
    (
        _a(
            "manufacturer",
            "Hanwell Electronics|Solace Devices|Tidemark Labs|Aldin Corp",
            "{S} is made by {v}.",
            "{v} manufactures {s}.",
            "{S} comes from {v}.",
        ),
        _a(
            "price", "$199|$349|$499|$799|$1,099", "{S} costs {v}.", "{S} retails for {v}.", "At {v}, {s} is not cheap."
        ),
        _a(
            "battery life",
            "12 hours|18 hours|two days|a full week",
            "The battery of {s} lasts {v}.",
            "{S} runs for {v} on a charge.",
        ),
        _a("weight", "180 grams|240 grams|1.2 kilograms|95 grams", "{S} weighs {v}.", "{S} tips the scales at {v}."),
        _a(
            "color",
            "midnight blue|forest green|coral red|graphite|pearl white",
            "{S} comes in {v}.",
            "A {v} version of {s} is available.",
            multi=True,
        ),
        _a(
            "feature",
            "water resistance|wireless charging|noise cancellation|a heart-rate sensor|a stylus|satellite messaging",
            "{S} includes {v}.",
            "{S} offers {v}.",
            "Reviewers praised {s} for {v}.",
            multi=True,
        ),
        _a("release year", "2021|2022|2023|2024", "{S} was released in {v}.", "{S} reached stores in {v}."),
        _a(
            "operating system",
            "Android|a custom Linux build|HarmonyOS|its own firmware",
            "{S} runs {v}.",
            "Under the hood, {s} uses {v}.",
        ),
    ),
)

CATEGORIES: tuple[Category, ...] = (PERSON, RESTAURANT, COMPANY, HOTEL, PRODUCT)

STYLES: dict[str, tuple[str, ...]] = {  # writing style -> prefixes for sentences that start with the subject
    "encyclopedia entry": ("",),
    "news report": ("According to recent reports, ", "Sources confirm that ", "It was reported this week that "),
    "user review": ("In my experience, ", "I have to say that ", "Worth noting: "),
    "casual conversation": ("So, ", "Turns out ", "Believe it or not, "),
}

SENTIMENT_REMARKS: dict[str, tuple[str, ...]] = {  # paragraph sentiment -> fact-free sentences that colour it
    "optimistic": (
        "People speak very warmly of {s}.",
        "Few can match the enthusiasm that {s} inspires.",
        "Admirers call {s} a genuine delight.",
    ),
    "neutral": (
        "More about {s} became known over the following months.",
        "Here is what is known about {s}.",
        "Opinions about {s} vary.",
    ),
    "analytic": (
        "Looking at the record, several points about {s} stand out.",
        "A closer look at {s} gives a mixed but informative picture.",
    ),
    "pessimistic": (
        "Not everyone has been impressed by {s}, however.",
        "Critics have been harsh about {s} lately.",
        "Some say {s} has disappointed them.",
    ),
}

FILLERS: tuple[str, ...] = (  # fact-free sentences about the entity that make paragraphs longer and noisier
    "{S} came up again in conversation this month.",
    "There is more to say about {s} than fits in a few lines.",
    "Many people first heard of {s} through friends.",
    "{S} has been discussed widely online.",
    "Not much else about {s} was mentioned at the time.",
    "Some of this was already common knowledge about {s}.",
)

# Single-valued attributes that can plausibly change over time (a birthplace or founding year cannot).
MUTABLE: frozenset[str] = frozenset(
    {
        "occupation",
        "employer",
        "residence",
        "head chef",
        "price range",
        "opening hours",
        "CEO",
        "headquarters",
        "employees",
        "owner",
        "check-in time",
        "star rating",
        "price",
        "operating system",
    }
)

UPDATE_TEMPLATES: tuple[str, ...] = (  # a single-valued attribute changes; {a} is the attribute's name
    "Update: {s}'s {a} is now {v}.",
    "Things have changed: the {a} of {s} is now {v}.",
)

# `detail: rich` (the paper configs): two more multi-valued attributes per category whose values are
# whole clauses, as the official SUMIE's values are, so that an entity's unlimited memory reaches the
# hundreds of tokens the paper reports (269-604) and a limit of K = 200 / 300 tokens binds
RICH_ATTRIBUTES: dict[str, tuple[Attribute, ...]] = {
    "person": (
        _a(
            "achievement",
            "led a five-year survey of coral reefs along the eastern coast|"
            "designed a footbridge that survived the worst flood in a century|"
            "recorded an album of improvised duets with a string quartet|"
            "exposed a procurement scandal at the regional transport agency|"
            "pioneered a keyhole technique for repairing infant heart valves|"
            "restored a derelict rail yard into a public wetland park",
            "{S} {v}.",
            "Among other things, {s} {v}.",
            "Few people know that {s} {v}.",
            multi=True,
        ),
        _a(
            "public role",
            "chairs the city's advisory board on coastal flooding|"
            "mentors first-generation university students every spring|"
            "hosts a weekly radio segment on urban design|"
            "volunteers as a coach for a youth rowing club|"
            "sits on the jury of an international documentary festival|"
            "runs free evening workshops for adult learners at the public library",
            "Outside work, {s} {v}.",
            "{S} also {v}.",
            multi=True,
        ),
    ),
    "restaurant": (
        _a(
            "signature dish",
            "slow-braised lamb shoulder with smoked aubergine and pomegranate|"
            "hand-cut noodles in a broth simmered for two full days|"
            "charred octopus with fermented chili butter and crisp potatoes|"
            "a tasting plate of seven seasonal vegetables from its own garden|"
            "wood-fired flatbread topped with wild mushrooms and aged cheese|"
            "a dark chocolate tart with salted caramel and roasted hazelnuts",
            "{S} is best known for {v}.",
            "Regulars at {s} keep ordering {v}.",
            multi=True,
        ),
        _a(
            "guest experience",
            "a chef's counter where diners watch the pastry team at work|"
            "long waits on weekend evenings because it takes no reservations|"
            "staff who explain the origin of every ingredient at the table|"
            "a quiet back garden lit by lanterns on summer nights|"
            "live acoustic music in the bar area every Thursday|"
            "generous portions that many guests end up taking home",
            "Reviews of {s} often mention {v}.",
            "{S} offers guests {v}.",
            multi=True,
        ),
    ),
    "company": (
        _a(
            "milestone",
            "opened its first overseas office in Singapore after a record year|"
            "shipped its ten millionth unit in the spring of last year|"
            "won a government contract to modernise the national rail signalling|"
            "completed the acquisition of a smaller rival in the logistics sector|"
            "moved its entire data centre operations to renewable power|"
            "listed its shares on the stock exchange after a decade of private ownership",
            "{S} {v}.",
            "In its history, {s} {v}.",
            multi=True,
        ),
        _a(
            "initiative",
            "a four-day working week trial for all office staff|"
            "an apprenticeship programme that trains two hundred young people a year|"
            "a fund that backs start-ups founded by former employees|"
            "a pledge to halve the packaging waste of its products by 2030|"
            "free language courses for employees who relocate abroad|"
            "a research partnership with three universities on battery recycling",
            "{S} launched {v}.",
            "Employees at {s} benefit from {v}.",
            multi=True,
        ),
    ),
    "hotel": (
        _a(
            "room feature",
            "floor-to-ceiling windows facing the harbour in every upper-floor suite|"
            "heated bathroom floors and deep soaking tubs in the corner rooms|"
            "small balconies with views over the old town rooftops|"
            "soundproofed walls that keep the street noise out at night|"
            "kitchenettes with a stove and a full-size fridge in the family rooms|"
            "beds made with locally woven wool blankets in winter",
            "{S} offers {v}.",
            "Guests of {s} appreciate {v}.",
            multi=True,
        ),
        _a(
            "guest remark",
            "a breakfast buffet with fresh pastries baked on site every morning|"
            "slow lifts that make the upper floors a long wait at peak times|"
            "friendly reception staff who arrange last-minute theatre tickets|"
            "thin walls between some of the older rooms on the second floor|"
            "a bar terrace that stays lively until well after midnight|"
            "parking that fills up early and costs extra per night",
            "Guests of {s} mention {v}.",
            "Reviews of {s} point to {v}.",
            multi=True,
        ),
    ),
    "product": (
        _a(
            "design detail",
            "a brushed aluminium frame with rounded edges that resists fingerprints|"
            "a hinge that folds flat without leaving a visible crease|"
            "physical buttons for volume and power placed on the same side|"
            "a textured back panel that keeps it from sliding off tables|"
            "a replaceable battery held in place by two standard screws|"
            "a small status light that shows the charge level at a glance",
            "{S} has {v}.",
            "Designers gave {s} {v}.",
            multi=True,
        ),
        _a(
            "reviewer note",
            "a screen that stays readable in bright midday sunlight|"
            "speakers that distort noticeably at the highest volume|"
            "a setup process that takes less than five minutes|"
            "software updates promised for at least five years|"
            "a charger that is sold separately and not included in the box|"
            "a camera that struggles to focus in dim indoor light",
            "Reviewers of {s} noted {v}.",
            "Testers found in {s} {v}.",
            multi=True,
        ),
    ),
}
DETAIL_LEVELS = ("compact", "rich")
